"""``backend=check``: everything about a task that can be checked without a GPU, at once.

It loads the task, computes its reference on NumPy at every correctness size (shapes, finite
values, integers in range, the same answer twice) and in every stress round (its outputs' dtypes
must hold it: a generic round that they cannot hold is named and skipped, a task's own is a
problem), runs the admission check (trivial kernels must
fail), evaluates the traffic model, and for every seed plans every configuration at every size
and compiles all of a small space (a sample of a large one, the default always) with NVRTC for
the target architecture, checking each compiled kernel's parameters against the spec (their sizes
in the cubin, what they point to in the source). It prints one line per problem and ends with a
verdict; ``evolve`` exits 0 only when there is none. The other settings are checked first, as a
run checks them (``evolve.app.validation``).
"""

from __future__ import annotations

import contextlib
import os
import random
from collections import defaultdict
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

import numpy as np

from evolve import dtypes
from evolve.errors import EvolveError, SpecError, describe
from evolve.evaluate.plan import make_plan, param_mismatch
from evolve.hardware import Hardware, named
from evolve.kernel.compiler import CompileError, compile_cuda, first_error, nvrtc_version, target_arch
from evolve.kernel.cubin import CubinError, inspect
from evolve.kernel.signature import wrong_types
from evolve.kernel.spec import Variant
from evolve.settings import BackendSettings
from evolve.task.correctness import admit, compare, unjudgeable
from evolve.task.files import with_task_dir
from evolve.task.task import Task, load_task, size_label

DEFAULT_TARGET = "h200"
MAX_PLANS = 200_000  # configurations x sizes planned per seed (beyond: the compiled sample only)

Say = Callable[[str], None]


def check_task(c: Mapping[str, Any], say: Say = print) -> int:
    """Check the task of a composed configuration; 0 when nothing is wrong, else 1."""
    problems: list[str] = []

    def problem(text: str) -> None:
        problems.append(text)
        say(f"problem: {text}")

    try:
        task = load_task(with_task_dir(c["task"]))
    except EvolveError as exc:
        problem(str(exc).splitlines()[0])
        return _verdict(c["task"].get("name", "?"), problems, say)
    hw = _target(c["hardware"], say)
    backend = BackendSettings.from_config(c["backend"])
    references(task, problem)
    if task.config.get("torch") and not problems:
        own_model(task, problem)
    if not problems:
        stress_rounds(task, problem, say)
        own_precision(task, say)
    if not problems:  # admission reruns the reference: no second report of the same fault
        try:
            admit(task)
        except EvolveError as exc:
            problem(str(exc))
    traffic(task, problem, say)
    compiled = seeds(task, hw, problem, say, int(backend.compile_all_up_to), int(backend.compile_sample),
                     _jobs(backend.jobs))
    if not problems:
        n = len(task.correctness_sizes)
        say(f"check: task {task.name} is ready: reference right at {n} size{'' if n == 1 else 's'}, "
            f"admitted, {compiled} ({hw.name})")
    return _verdict(task.name, problems, say)


def _verdict(name: str, problems: list[str], say: Say) -> int:
    if problems:
        say(f"check: task {name} has {len(problems)} problem{'s' if len(problems) > 1 else ''}")
        return 1
    return 0


def _target(cfg: Mapping[str, Any], say: Say) -> Hardware:
    if cfg.get("name") == "auto":
        from evolve.hardware import catalog

        hw = catalog()[DEFAULT_TARGET][0]
        say(f"note: hardware=auto reads no GPU here: checking for {hw.name} ({hw.arch}); "
            "name another target with hardware=NAME")
        return hw
    return named(cfg)


def _jobs(value: Any) -> int:
    return max(1, os.cpu_count() or 1) if value in ("auto", None) else max(1, int(value))


def references(task: Task, problem: Say) -> None:
    """The reference at every correctness size: it runs, returns every output with its shape,
    finite values (integers of their dtype's range for exact outputs), and the same twice."""
    raised: dict[str, list[str]] = defaultdict(list)  # the same exception at several sizes: one line
    for i, sizes in enumerate(task.correctness_sizes):
        where = f"reference at {size_label(sizes)}"
        try:
            with np.errstate(all="ignore"):  # a NaN or inf it makes is reported below, once
                inputs = task.make_inputs(np, sizes, 1000 + i)
                ref = task.expected(np, inputs, sizes)
                again = task.expected(np, task.make_inputs(np, sizes, 1000 + i), sizes)
        except EvolveError as exc:
            raised[str(exc).splitlines()[0]].append(size_label(sizes))
            continue
        except Exception as exc:
            raised[describe(exc)].append(size_label(sizes))
            continue
        for arg in task.outputs:
            r = np.asarray(ref[arg.name], dtype=np.float64)
            d = dtypes.get(arg.dtype)
            if not np.isfinite(r).all():
                problem(f"{where}: {arg.name} holds {int((~np.isfinite(r)).sum())} NaN or infinite values")
            elif d.exact and not (np.array_equal(r, np.rint(r)) and d.range()[0] <= r.min()
                                  and r.max() <= d.range()[1]):
                problem(f"{where}: {arg.name} is {arg.dtype} but the reference gives values that are not "
                        f"integers in [{d.range()[0]}, {d.range()[1]}]")
            elif not np.array_equal(r, np.asarray(again[arg.name], dtype=np.float64), equal_nan=True):
                problem(f"{where}: {arg.name} differs between two calls on the same inputs")
    for reason, where in raised.items():
        n = len(task.correctness_sizes)
        problem(f"reference at {where[0]}: {reason}" if len(where) == 1 else
                f"reference: {reason} (at {len(where)} of {n} sizes, first: {where[0]})")


def own_model(task: Task, problem: Say) -> None:
    """A PyTorch task: the Model run in its own dtypes (float32) must pass against its float64 run
    at every correctness size, or the tolerance asks what not even PyTorch does."""
    for i, sizes in enumerate(task.correctness_sizes):
        inputs = task.make_inputs(np, sizes, 2000 + i)
        wide = {a.name: dtypes.widen(np, inputs[a.name], a.dtype) for a in task.inputs}
        try:
            got = task.reference.run(np, wide, sizes, native=True)  # type: ignore[attr-defined]
        except Exception as exc:
            problem(f"the Model in its own dtypes at {size_label(sizes)}: {describe(exc)}")
            return
        ref = task.expected(np, inputs, sizes)
        for a in task.outputs:
            if reason := compare(np, a.name, dtypes.store(np.asarray(got[a.name]), a.dtype), ref[a.name],
                                 task.tolerance_for(a), None, a.dtype):
                problem(f"the Model in its own dtypes fails its float64 reference at {size_label(sizes)} "
                        f"({reason}): loosen the tolerance (EVOLVE_TASK = {{'tolerance': {{atol, rtol, "
                        "l2}} in the problem file)")
                return


def stress_rounds(task: Task, problem: Say, say: Say) -> None:
    """The float64 reference in every stress round at every correctness size: where an output's
    dtype cannot hold it, the round judges nothing (the evaluator skips it there)."""
    judged = 0
    for st in task.stress:
        for i, sizes in enumerate(task.correctness_sizes):
            try:
                with np.errstate(all="ignore"):
                    refs = task.expected(np, task.make_inputs(np, sizes, 2000 + i, st), sizes)
            except Exception as exc:
                problem(f"stress round {st.name} at {size_label(sizes)}: {describe(exc)}")
                continue
            if (why := unjudgeable(np, task, refs)) is None:
                judged += 1
            elif st.generic:
                say(f"note: stress round {st.name} at {size_label(sizes)} is skipped: {why}")
            else:
                problem(f"stress round {st.name} at {size_label(sizes)}: {why}; "
                        "a round that cannot judge is refused")
    total = len(task.stress) * len(task.correctness_sizes)
    say(f"check: stress rounds ({', '.join(st.name for st in task.stress) or 'none'}): the float64 "
        f"reference is finite and fits the outputs in {judged} of {total} (round, size)")


def own_precision(task: Task, say: Say, rounds: int = 8) -> None:
    """The reference computed in float32 (NumPy's sums, more accurate than a plain loop) on many
    inputs, judged by the task's own tolerance: where even that fails, an honest float32 kernel
    will fail too, on some inputs and not others, and the tolerance is likely too tight."""
    floats = [a for a in task.outputs if not dtypes.get(a.dtype).exact]
    if not floats or any(a.dtype == "float64" for a in task.args):
        return
    failed: list[str] = []
    total = 0
    for i, sizes in enumerate(task.correctness_sizes):
        for rnd, st in [(r, None) for r in range(rounds)] + [(0, st) for st in task.stress]:
            try:
                with np.errstate(all="ignore"):
                    inputs = task.make_inputs(np, sizes, 3000 + 100 * i + rnd, st)
                    refs = task.expected(np, inputs, sizes)
                    if st is not None and unjudgeable(np, task, refs):
                        continue
                    narrow = {a.name: dtypes.widen(np, inputs[a.name], a.dtype).astype(np.float32)
                              if not dtypes.get(a.dtype).exact else inputs[a.name] for a in task.inputs}
                    got = task.reference(np, narrow, dict(sizes))
                    total += 1
                    for a in floats:
                        out = dtypes.store(np.asarray(got[a.name], dtype=np.float32), a.dtype)
                        tol = task.tolerance_for(a, sizes)
                        if reason := compare(np, a.name, out, refs[a.name], tol, None, a.dtype):
                            failed.append(f"{size_label(sizes)}{f' ({st.name})' if st else ''}: {reason}")
                            break
            except Exception:  # a reference that cannot take float32 arrays: nothing to learn here
                return
    if failed:
        say(f"warning: the reference computed in float32 fails the task's own tolerance in {len(failed)} "
            f"of {total} rounds (first: {failed[0]}): the tolerance may be tighter than float32 "
            "arithmetic allows, and honest kernels will fail on some inputs and pass on others")


def traffic(task: Task, problem: Say, say: Say) -> None:
    for sizes in task.timing_sizes:
        try:
            nbytes, flops = task.bytes(sizes), task.flops(sizes)
        except SpecError as exc:
            problem(f"traffic at {size_label(sizes)}: {exc}")
            continue
        if nbytes <= 0 or flops < 0:
            problem(f"traffic at {size_label(sizes)}: bytes must be positive and flops not negative "
                    f"(got {nbytes} and {flops})")
        elif nbytes < 1 << 24 and flops < 1e9:
            say(f"note: the timing size {size_label(sizes)} moves {nbytes / 1e6:.3g} MB: launch overhead "
                "will weigh on the times (a larger timing size measures the kernel better)")


def seeds(task: Task, hw: Hardware, problem: Say, say: Say, all_up_to: int, sample: int, jobs: int) -> str:
    """Plan and compile the seeds; what was done, in words."""
    if not task.seed_paths:
        say("note: no seed kernels: an LLM writes the first one (llm=openai, local or mailbox); "
            "without one, evolve stops")
        return "no seeds"
    planned = compiled = 0
    work: list[tuple[str, Variant, dict[str, int]]] = []
    targets: set[str] = set()  # what the seeds compile for: the GPU's arch, or its arch-specific target
    for path in task.seed_paths:
        label = f"seed {path.name}"
        try:
            v = Variant.parse(path.read_text(), name=path.stem)
        except (SpecError, OSError) as exc:
            problem(f"{label}: {exc}")
            continue
        space = v.spec.space()
        if not space:
            problem(f"{label}: no configuration satisfies the restrictions")
            continue
        with contextlib.suppress(CompileError):  # reported by the compile below, per configuration
            targets.add(target_arch(hw.arch, v.spec.arch_specific))
        pick = _pick(space, v.spec.default, all_up_to, sample)
        plan_all = len(space) * (len(task.correctness_sizes) + len(task.timing_sizes)) <= MAX_PLANS
        planned += _plan(task, hw, v, space if plan_all else pick, label, problem)
        work += [(label, v, cfg) for cfg in pick]
    try:
        nvrtc_version()
    except EvolveError as exc:  # once, not once per configuration
        problem(str(exc))
        work = []
    failed: dict[tuple[str, str], list[dict[str, int]]] = defaultdict(list)  # one line per mistake
    for label, cfg, reason in _compile(task, hw, work, jobs):
        if reason:
            failed[label, reason].append(cfg)
        else:
            compiled += 1
    for (label, reason), cfgs in failed.items():
        n = sum(w[0] == label for w in work)
        problem(f"{label} {_fmt(cfgs[0])}: {reason}" if len(cfgs) == 1 else
                f"{label}: {reason} (in {len(cfgs)} of {n} configurations, first: {_fmt(cfgs[0])})")
    return (f"{len(task.seed_paths)} seed(s), {planned} configurations planned at every size, "
            f"{compiled} compiled for {', '.join(sorted(targets)) or hw.arch}")


def _pick(space: list[dict[str, int]], default: dict[str, int], all_up_to: int,
          sample: int) -> list[dict[str, int]]:
    if len(space) <= all_up_to:
        return space
    others = [cfg for cfg in space if cfg != default]
    return [default, *random.Random(0).sample(others, min(sample, len(others)))]


def _plan(task: Task, hw: Hardware, v: Variant, configs: list[dict[str, int]], label: str,
          problem: Say) -> int:
    """Plan each configuration at every size; one line per size where some cannot launch."""
    failures: dict[str, list[tuple[dict[str, int], str]]] = defaultdict(list)
    for cfg in configs:
        for sizes in (*task.correctness_sizes, *task.timing_sizes):
            try:
                make_plan(v.spec, task, sizes, cfg, hw)
            except SpecError as exc:
                failures[size_label(sizes)].append((cfg, str(exc)))
    for where, fails in failures.items():
        cfg, reason = fails[0]
        problem(f"{label}: {len(fails)} of {len(configs)} configurations cannot launch at {where} "
                f"(first: {_fmt(cfg)}: {reason})")
    return len(configs)


def _compile_one(source: str, defines: dict[str, Any], arch: str,
                 arch_specific: bool) -> tuple[bytes | None, str]:
    try:
        return compile_cuda(source, defines, target_arch(arch, arch_specific)).cubin, ""
    except CompileError as exc:
        return None, first_error(str(exc))
    except EvolveError as exc:
        return None, str(exc)


def _compile(task: Task, hw: Hardware, work: list[tuple[str, Variant, dict[str, int]]],
             jobs: int) -> list[tuple[str, dict[str, int], str]]:
    """Compile each (seed, configuration); check the kernels' parameters against the plans."""
    args = [(v.source, {**cfg, **dict(task.defines)}, hw.arch, v.spec.arch_specific) for _, v, cfg in work]
    if jobs > 1 and len(args) > 1:
        with ProcessPoolExecutor(min(jobs, len(args)), mp_context=get_context("spawn")) as pool:
            results = list(pool.map(_compile_one, *zip(*args, strict=True)))
    else:
        results = [_compile_one(*a) for a in args]
    out = []
    for (label, v, cfg), (cubin, reason) in zip(work, results, strict=True):
        if cubin is not None:
            reason = _check_cubin(task, hw, v, cfg, cubin)
        out.append((label, cfg, reason))
    return out


def _check_cubin(task: Task, hw: Hardware, v: Variant, cfg: dict[str, int], cubin: bytes) -> str:
    try:
        info = inspect(cubin)
    except CubinError as exc:
        return f"the compiled module cannot be checked: {exc}"
    for sizes in task.correctness_sizes[:1]:
        try:
            plan = make_plan(v.spec, task, sizes, cfg, hw)
        except SpecError:
            return ""  # reported by the planning
        if missing := [c.kernel for c in plan.calls if c.kernel not in info.params]:
            return f"kernel {missing[0]!r} is not in the compiled module: declare it extern \"C\" __global__"
        if reason := param_mismatch(plan, info):
            return reason
        kinds = {a.name: a.dtype for a in task.args}
        defines = {**dict(task.defines), **cfg}
        for call in plan.calls:  # what the parameters point to: a cubin records only their sizes
            names = [str(v) if kind == "buffer" else "" for kind, v in call.args]
            if reason := wrong_types(v.source, call.kernel, names, kinds, defines):
                return reason
    return ""


def _fmt(cfg: Mapping[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in cfg.items()) or "(no tunables)"
