"""Hardware targets: the limits used to check launches and the ceilings results are judged by.

Named targets come from ``conf/hardware/*.yaml`` (datasheet figures). ``auto`` reads the
device the worker runs on and takes the datasheet peaks of the catalog entry whose
``device_names`` match it. The bandwidth ceiling is always *measured* (or recorded), not taken
from a datasheet: a kernel is judged against what the memory system really delivers, which is
the faster of a device-to-device copy and a read-only stream (reads alone run faster than a copy's
mix of reads and writes, so a read-heavy kernel would otherwise seem to beat the ceiling).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import yaml

from evolve.errors import EvolveError
from evolve.paths import CONF_DIR

MEASURED = ("copy_bandwidth_bps", "read_bandwidth_bps")
# The compute peaks a task may name as the one that bounds it (``traffic.peak``), by field:
# datasheet figures, dense (no structured sparsity), in FLOP/s (int8: operations per second).
PEAKS = {"fp32": "peak_fp32_flops", "fp64": "peak_fp64_flops", "tf32_tensor": "peak_tf32_tensor_flops",
         "fp16_tensor": "peak_fp16_tensor_flops", "bf16_tensor": "peak_bf16_tensor_flops",
         "fp8_tensor": "peak_fp8_tensor_flops", "int8_tensor": "peak_int8_tensor_ops"}


@dataclass(frozen=True)
class Hardware:
    name: str
    arch: str  # e.g. sm_90
    sms: int
    max_threads_per_block: int
    max_threads_per_sm: int
    max_shared_per_block: int  # bytes, with the opt-in attribute raised
    shared_per_sm: int
    registers_per_sm: int
    l2_bytes: int
    peak_dram_bps: float  # datasheet, bytes/s
    peak_fp32_flops: float  # datasheet, FLOP/s (FFMA)
    copy_bandwidth_bps: float | None = None  # measured device-to-device copy (read + write)
    read_bandwidth_bps: float | None = None  # measured read-only stream
    device: str = ""  # the device's own name, when read from one
    memory_bytes: int = 0  # global memory (the device's own figure when read from one), 0: unknown
    # further datasheet peaks (dense), 0 where the datasheet gives none
    peak_fp64_flops: float = 0.0
    peak_tf32_tensor_flops: float = 0.0
    peak_fp16_tensor_flops: float = 0.0
    peak_bf16_tensor_flops: float = 0.0
    peak_fp8_tensor_flops: float = 0.0
    peak_int8_tensor_ops: float = 0.0

    def peak(self, name: str) -> float:
        """A compute peak by its name in PEAKS (datasheet; 0 when unknown)."""
        return float(getattr(self, PEAKS[name]) or 0.0)

    @property
    def bandwidth_ceiling(self) -> float:
        return max(self.measured_ceilings().values(), default=self.peak_dram_bps)

    def measured_ceilings(self) -> dict[str, float]:
        return {k: v for k in MEASURED if (v := getattr(self, k))}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Hardware:
        """Typed fields, so that YAML's "4.8e12" (a string to YAML 1.1) is still a number."""
        types = {f.name: f.type for f in fields(cls)}
        out: dict[str, Any] = {}
        for k, v in d.items():
            if k not in types:
                continue
            t = str(types[k])
            if v is None and k in PEAKS.values():
                out[k] = 0.0  # the datasheet gives none
            elif v is None and k not in MEASURED:
                continue  # not given (the schema's None): the field's default, or missing
            elif v is None or t == "str":
                out[k] = v
            elif t.startswith("int"):
                out[k] = int(v)
            else:
                out[k] = float(v)
        return cls(**out)


def catalog() -> dict[str, tuple[Hardware, list[str]]]:
    """Named targets with the device-name patterns that identify them."""
    out = {}
    for path in sorted((CONF_DIR / "hardware").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        if raw.get("name") == "auto":
            continue
        out[raw["name"]] = (Hardware.from_dict(raw), list(raw.get("device_names", [])))
    return out


def named(cfg: Mapping[str, Any]) -> Hardware:
    try:
        return Hardware.from_dict({k: v for k, v in cfg.items() if k != "device_names"})
    except (TypeError, ValueError) as exc:
        raise EvolveError(f"hardware {cfg.get('name')}: malformed target ({exc})") from None


def from_device(props: Mapping[str, Any]) -> Hardware:
    """A target for the device the worker reported, with catalog peaks where it is known."""
    base, key = None, None
    for name, (hw, patterns) in catalog().items():
        if any(re.search(p, props["name"]) for p in patterns):
            base, key = hw, name
            break
    return Hardware(
        name=key or _slug(props["name"]),
        arch=f"sm_{props['major']}{props['minor']}",
        sms=props["sms"],
        max_threads_per_block=props["max_threads_per_block"],
        max_threads_per_sm=props["max_threads_per_sm"],
        max_shared_per_block=props["max_shared_per_block"],
        shared_per_sm=props["shared_per_sm"],
        registers_per_sm=props["registers_per_sm"],
        l2_bytes=props["l2_bytes"],
        memory_bytes=props.get("memory_bytes", 0),
        peak_dram_bps=base.peak_dram_bps if base else 0.0,
        device=props["name"],
        **{f: getattr(base, f) if base else 0.0 for f in PEAKS.values()},
    )


def check_device(target: Hardware, props: Mapping[str, Any]) -> Hardware:
    """A named target must describe the GPU we measure on; fill in the device's name."""
    arch = f"sm_{props['major']}{props['minor']}"
    if arch != target.arch:
        raise EvolveError(
            f"hardware={target.name} is {target.arch} but the GPU is {props['name']} ({arch}); "
            "use hardware=auto"
        )
    return replace(target, device=props["name"], l2_bytes=props["l2_bytes"],
                   memory_bytes=props.get("memory_bytes", target.memory_bytes))


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "gpu"
