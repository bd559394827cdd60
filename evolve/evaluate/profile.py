"""Where a kernel's time goes, from Nsight Compute: the figures a parent's prompt carries.

Time, registers and occupancy say how fast a kernel is, not what holds it back. With
``evolution.profile=true`` the evaluator runs ``ncu`` once on each population member's best
configuration (again only when the member gets 10% faster) and records the figures below in the
study (``profile:<variant id>``), so a proposer on any machine puts them into its prompts. This
module knows the metrics, reads ncu's CSV and writes the prompt's text; it needs no GPU. What the
search keeps of them is ``evolve.search.profiler``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from typing import Any

# name in the record -> ncu metric. Percentages are of the peak sustained rate over the kernel's time
# (throughputs) or over the cycles an SM was active (pipes, issue, occupancy).
THROUGHPUT = {
    "memory_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "issue_pct": "sm__inst_issued.avg.pct_of_peak_sustained_active",
    "occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "fma_pipe_pct": "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "alu_pipe_pct": "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active",
    "lsu_pipe_pct": "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active",
    "tensor_pipe_pct": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "l1_hit_pct": "l1tex__t_sector_hit_rate.pct",
}
COUNTS = {
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
    "l2_bytes": "lts__t_bytes.sum",
    "global_load_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "global_load_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "global_store_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "global_store_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "shared_load_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "shared_load_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "shared_store_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "shared_store_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
}
# warp stall reason -> what it means, for the prompt (ncu's descriptions, shortened)
STALLS = {
    "long_scoreboard": "waiting for global/local memory (L1TEX) results",
    "short_scoreboard": "waiting for shared memory or special-function results",
    "barrier": "waiting at __syncthreads / a block barrier",
    "mio_throttle": "shared-memory / special instruction queue full",
    "lg_throttle": "global/local memory instruction queue full",
    "math_pipe_throttle": "an arithmetic pipe is busy",
    "wait": "fixed-latency dependencies",
    "not_selected": "ready but another warp issued (enough parallelism)",
    "selected": "issuing",
    "dispatch_stall": "dispatcher stall",
    "membar": "memory fence",
    "branch_resolving": "branch target computation",
    "no_instruction": "instruction cache miss",
    "imc_miss": "immediate constant cache miss",
    "tex_throttle": "texture queue full",
    "drain": "draining memory stores at exit",
    "sleeping": "nanosleep",
    "gmma": "waiting for wgmma (warpgroup MMA) results",
    "misc": "miscellaneous",
}
TIME = "gpu__time_duration.sum"


def stall_metric(reason: str) -> str:
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


def metrics() -> list[str]:
    """Every metric ncu is asked for."""
    return [TIME, *THROUGHPUT.values(), *COUNTS.values(), *(stall_metric(r) for r in STALLS)]


def parse_csv(text: str) -> list[dict[str, str]]:
    """The kernels' rows of ``ncu --csv --page raw`` output (its own ``==PROF==`` lines and anything
    else before the header are skipped)."""
    lines = [line for line in text.splitlines() if not line.startswith("==")]
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    # the second row gives the units; kernels follow
    return [dict(zip(header, row, strict=False)) for row in rows[2:] if len(row) == len(header)]


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def summarize(rows: Sequence[Mapping[str, str]]) -> dict[str, Any]:
    """One profile for one call of the candidate: counts summed over its kernels, rates and
    stalls averaged weighted by each kernel's time."""
    if not rows:
        return {}
    times = [_number(r.get(TIME)) or 0.0 for r in rows]
    total = sum(times) or 1.0
    out: dict[str, Any] = {"kernels": len(rows), "time_ns": sum(times)}
    for name, metric in COUNTS.items():
        values = [_number(r.get(metric)) for r in rows]
        if all(v is not None for v in values):
            out[name] = sum(v for v in values if v is not None)

    def weighted(metric: str) -> float | None:
        values = [_number(r.get(metric)) for r in rows]
        if any(v is None for v in values):
            return None
        return sum(v * t for v, t in zip(values, times, strict=True) if v is not None) / total

    for name, metric in THROUGHPUT.items():
        if (v := weighted(metric)) is not None:
            out[name] = round(v, 2)
    stalls = {r: round(v, 3) for r in STALLS if (v := weighted(stall_metric(r))) is not None}
    if stalls:
        out["stalls"] = stalls
    return out


def describe(p: Mapping[str, Any], at: str = "") -> str:
    """The profile as a prompt shows it; empty when there is none."""
    if not p or "error" in p:
        return ""
    pct = {k: p[k] for k in THROUGHPUT if k in p}
    lines = [f"Nsight Compute profile{at} ({p.get('kernels', 1)} kernel launch(es), "
             f"{p.get('time_ns', 0) / 1e6:.4g} ms under the profiler):"]
    rates = _known(pct, [("memory", "memory_pct"), ("DRAM", "dram_pct"), ("SM", "sm_pct")])
    busy = _known(pct, [("issue slots busy", "issue_pct"), ("achieved occupancy", "occupancy_pct")])
    if head := "; ".join(x for x in (rates and f"throughput, % of peak: {rates}", busy) if x):
        lines.append(f"- {head}")
    if pipes := _known(pct, [("FMA", "fma_pipe_pct"), ("ALU", "alu_pipe_pct"), ("load/store", "lsu_pipe_pct"),
                             ("tensor", "tensor_pipe_pct")]):
        lines.append(f"- pipes busy: {pipes}")
    traffic = [f"{name} {n / 1e6:.1f} MB" for name, k in
               (("DRAM read", "dram_read_bytes"), ("DRAM written", "dram_write_bytes"), ("L2", "l2_bytes"))
               if (n := p.get(k)) is not None]
    if hits := _known(pct, [("L2 hit rate", "l2_hit_pct"), ("L1 hit rate", "l1_hit_pct")]):
        traffic.append(hits)
    if traffic:
        lines.append(f"- memory traffic: {', '.join(traffic)}")
    access = []
    for kind in ("load", "store"):
        sectors, requests = p.get(f"global_{kind}_sectors"), p.get(f"global_{kind}_requests")
        if sectors is not None and requests:
            access.append(f"{kind}s {sectors / requests:.1f}")
    if access:
        lines.append(f"- global memory sectors (32 B) per warp request: {', '.join(access)} "
                     "(4 for a warp reading consecutive 4-byte words, 16 for 16-byte words; more is "
                     "uncoalesced)")
    shared = []
    for kind in ("load", "store"):
        waves, conflicts = p.get(f"shared_{kind}_wavefronts"), p.get(f"shared_{kind}_conflicts")
        if conflicts is not None:
            shared.append(f"{kind}s {int(conflicts):,} conflicts" + (
                f" in {int(waves):,} wavefronts ({100 * conflicts / waves:.0f}%)" if waves else ""))
    if shared:
        lines.append(f"- shared-memory bank conflicts: {'; '.join(shared)}")
    stalls = sorted((p.get("stalls") or {}).items(), key=lambda kv: -kv[1])
    top = [(r, v) for r, v in stalls if r != "selected" and v > 0][:4]
    if top:
        lines.append("- top warp stalls (cycles a warp waits per issued instruction): " + "; ".join(
            f"{r} {v:.2f} ({STALLS.get(r, r)})" for r, v in top))
    return "\n".join(lines)


def _known(pct: Mapping[str, float], items: Sequence[tuple[str, str]]) -> str:
    """``name N%`` for the items measured, comma-separated (a metric not read is left out)."""
    return ", ".join(f"{name} {pct[k]:.0f}%" for name, k in items if k in pct)
