"""Recorded measurements: what the replay backend answers from.

A recording is a JSON Lines file, one line per measured candidate (plus the measured
bandwidth ceilings), keyed by hardware, task, variant id (normalized source + spec) and
tunables. The files shipped under ``evolve/recordings/<hardware>/<task>.jsonl`` were measured
with this project's own evaluator on the GPU they name, on the date each line carries.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evolve import __version__
from evolve.errors import EvolveError
from evolve.evaluate.measurement import Measurement
from evolve.hardware import MEASURED, Hardware
from evolve.kernel.spec import CandidateKey, Variant, candidate_key
from evolve.paths import RECORDINGS_DIR


def builtin_path(hardware: str, task: str) -> Path:
    return RECORDINGS_DIR / hardware / f"{task}.jsonl"


@dataclass
class Recording:
    measurements: dict[CandidateKey, Measurement] = field(default_factory=dict)
    ceilings: dict[str, float] = field(default_factory=dict)
    device: str = ""  # the GPU the measurements were made on
    dates: set[str] = field(default_factory=set)

    @classmethod
    def load(cls, paths: Iterable[Path], hardware: str, task: str) -> Recording:
        rec = cls()
        for path in paths:
            if not path.is_file():
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                except json.JSONDecodeError:
                    raise EvolveError(f"{path}:{n}: not valid JSON") from None
                if d.get("hardware") != hardware:
                    continue
                rec.device = d.get("device") or rec.device
                if d.get("kind") == "ceiling" and not rec.ceilings:  # the first file's wins
                    rec.ceilings = {k: float(d[k]) for k in MEASURED if k in d}
                elif d.get("kind") == "measurement" and d.get("task") == task:
                    rec.measurements[candidate_key(d["variant"], d["tunables"])] = Measurement.from_dict(
                        d["measurement"]
                    )
                    rec.dates.add(d.get("date", "?"))
        return rec


class RecordingWriter:
    """Appends measurements as they are made, so an interrupted recording keeps its lines."""

    def __init__(self, path: Path, hardware: Hardware, task: str):
        self.path, self.hardware, self.task = path, hardware, task
        path.parent.mkdir(parents=True, exist_ok=True)
        if hardware.measured_ceilings():
            self._write({"kind": "ceiling", **hardware.measured_ceilings()})

    def add(self, variant: Variant, tunables: Mapping[str, int], m: Measurement) -> None:
        self._write({
            "kind": "measurement", "task": self.task, "variant": variant.id, "name": variant.name,
            "tunables": dict(tunables), "measurement": m.to_dict(),
        })

    def _write(self, d: dict[str, Any]) -> None:
        d = {
            **d, "hardware": self.hardware.name, "device": self.hardware.device,
            "date": dt.date.today().isoformat(), "tool": f"cuda-evolve {__version__}",
        }
        with self.path.open("a") as f:
            f.write(json.dumps(d, sort_keys=True) + "\n")
