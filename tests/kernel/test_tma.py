"""TMA tensor maps and thread-block clusters in the launch spec (CPU): parsing and every refusal,
the plan's boxes, strides and clusters, and the cubin parameter check of a real sm_90a kernel
that takes a ``const __grid_constant__`` CUtensorMap; specs without them are planned as before."""

from __future__ import annotations

import dataclasses

import pytest

from evolve.errors import SpecError
from evolve.evaluate.plan import ARG_BYTES, LaunchPlan, make_plan, param_mismatch
from evolve.hardware import named
from evolve.kernel.compiler import compile_cuda
from evolve.kernel.cubin import inspect
from evolve.kernel.spec import Variant, iter_names, parse_spec
from evolve.results.export import _launches
from evolve.task.files import read_task_file
from evolve.task.task import load_task
from tests.helpers.tasks import TASKS, hardware_config, nvrtc_or_skip, task
from tests.helpers.tma_kernels import CLUSTER_IDS, TASK_FILE, TILE_COPY, TMA_OUTSIDE

H200 = named(hardware_config("h200"))
GEMM = """/*@evolve
tensor_maps:
  - {name: x_map, buffer: x, box: [64, BM], swizzle: 128, when: "K % 8 == 0"}
  - {name: w_map, buffer: w, box: [BK, BN], swizzle: SW}
kernels:
  - name: k
    grid: ["CL * ceil_div(N, BN * CL)", "ceil_div(M, BM)"]
    block: 128
    cluster: [CL, 1]
    args: [x_map, w_map, y, M, N, K]
tunables:
  BM: {values: [64, 128], default: 128}
  BN: {values: [64, 128], default: 64}
  BK: {values: [4, 64, 128], default: 64}
  SW: {values: [0, 16, 32, 64, 128], default: 128}
  CL: {values: [1, 2, 3], default: 2}
*/
"""
SIZES = {"M": 255, "N": 129, "K": 520}  # hgemm: M and N ragged, K a multiple of 8
DEFAULT = {"BM": 128, "BN": 64, "BK": 64, "SW": 128, "CL": 2}


def gemm(spec: str = GEMM, **tunables: int) -> LaunchPlan:
    v = Variant.parse(spec)
    return make_plan(v.spec, task("hgemm"), tunables.pop("sizes", SIZES), {**DEFAULT, **tunables}, H200)


def test_the_spec_declares_maps_and_clusters_and_names_them_for_binding_checks() -> None:
    spec = parse_spec(GEMM)
    x, w = spec.tensor_maps
    assert (x.name, x.buffer, [e.text for e in x.box], x.swizzle.text, x.when and x.when.text) == (
        "x_map", "x", ["64", "BM"], "128", "K % 8 == 0")
    assert (w.swizzle.text, w.when) == ("SW", None)
    assert [e.text for e in spec.launches[0].cluster or ()] == ["CL", "1"]
    names = set(iter_names(spec))
    assert {"x", "w", "y", "M", "N", "K", "BM", "BN", "BK", "SW", "CL"} <= names
    assert not names & {"x_map", "w_map"}  # a map is no size or buffer the task must define


def test_the_plan_resolves_boxes_extents_strides_and_the_cluster() -> None:
    plan = gemm()
    x, w = plan.tensor_maps
    assert (x.buffer, x.dtype, x.dims, x.strides, x.box, x.swizzle) == (
        "x", "float16", (520, 255), (1040,), (64, 128), 128)  # innermost first: K, then M
    assert (w.dims, w.strides, w.box) == ((520, 129), (1040,), (64, 64))
    (call,) = plan.calls
    assert call.grid == (4, 2, 1) and call.cluster == (2, 1, 1)
    assert call.args[:3] == (("tensor_map", "x_map"), ("tensor_map", "w_map"), ("buffer", "y"))
    assert gemm(BM=64, CL=1).calls[0].cluster == (1, 1, 1)


PERSISTENT = """/*@evolve
kernels:
  - {name: k, grid: "min(ceil_div(M, BM) * ceil_div(N, 64), SMS)", block: 128, args: [x, w, y, M, N, K]}
tunables:
  BM: {values: [64, 128], default: 128}
*/
"""


def test_a_persistent_grid_reads_the_multiprocessor_count_of_the_gpu_it_is_planned_for() -> None:
    v = Variant.parse(PERSISTENT)
    big = {"M": 4096, "N": 4096, "K": 64}
    assert make_plan(v.spec, task("hgemm"), big, {"BM": 128}, H200).calls[0].grid == (132, 1, 1)
    small_gpu = dataclasses.replace(H200, sms=16)
    assert make_plan(v.spec, task("hgemm"), big, {"BM": 128}, small_gpu).calls[0].grid == (16, 1, 1)
    assert make_plan(v.spec, task("hgemm"), SIZES, {"BM": 128}, H200).calls[0].grid == (2 * 3, 1, 1)
    assert "SMS" in set(iter_names(v.spec))


def test_a_tunable_may_not_take_the_name_of_a_device_property() -> None:
    with pytest.raises(SpecError, match="'SMS' has the name of a device property"):
        parse_spec(PERSISTENT.replace("BM: {", "SMS: {").replace("ceil_div(M, BM)", "ceil_div(M, SMS)"))


def test_a_map_whose_condition_fails_is_not_made_but_still_passed() -> None:
    """K = 7: rows of 14 bytes, which TMA cannot describe. x_map's condition says so: the kernel
    gets 128 zero bytes for it (and must take another path); w_map has none, so K = 7 is refused."""
    both = GEMM.replace("swizzle: SW}", 'swizzle: SW, when: "K % 8 == 0"}')
    plan = gemm(both, sizes={"M": 3, "N": 5, "K": 7})
    assert plan.tensor_maps == ()
    assert plan.calls[0].args[:2] == (("tensor_map", "x_map"), ("tensor_map", "w_map"))
    assert [m.name for m in gemm(both).tensor_maps] == ["x_map", "w_map"]
    with pytest.raises(SpecError, match=r"^tensor map w_map: w's dimension 1 \(innermost first\) has a "
                                        r"stride of 14 bytes at \{'M': 3, 'N': 5, 'K': 7\}; TMA needs a "
                                        r"multiple of 16"):
        gemm(sizes={"M": 3, "N": 5, "K": 7})


@pytest.mark.parametrize(("tunables", "words"), [
    ({"BK": 4}, "tensor map w_map: the inner box dimension is 8 bytes (4 x float16); "
                "TMA needs a multiple of 16"),
    ({"BK": 128}, "tensor map w_map: the inner box dimension is 256 bytes, "
                  "more than the 128-byte swizzle span"),
    ({"SW": 32}, "inner box dimension is 128 bytes, more than the 32-byte swizzle span"),
    ({"SW": 0, "BK": 128}, None),  # no swizzle: any inner box of whole 16-byte units
    ({"SW": 16}, "tensor map w_map: swizzle SW = 16 at"),
])
def test_plan_refusals_of_boxes(tunables: dict[str, int], words: str | None) -> None:
    if words is None:
        assert gemm(**tunables).tensor_maps[1].box == (128, 64)
        return
    with pytest.raises(SpecError) as exc:
        gemm(**tunables)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_the_grid_must_be_whole_clusters() -> None:
    ragged = GEMM.replace('"CL * ceil_div(N, BN * CL)"', '"ceil_div(N, BN)"')  # 3 blocks for N = 129
    assert gemm(ragged, CL=1).calls[0].grid == (3, 2, 1)
    with pytest.raises(SpecError, match=r"^k: grid\.x = 3 is not a multiple of cluster\.x = 2$"):
        gemm(ragged, CL=2)


@pytest.mark.parametrize(("edit", "words"), [
    (("box: [BK, BN]", "box: [BK, 300]"), "tensor map w_map: box[1] = 300"),
    (("box: [BK, BN]", "box: [BK, 0]"), "tensor map w_map: box[1] = 0"),
    (("box: [BK, BN]", "box: [BK]"), "tensor map w_map: box has 1 dimensions but w has 2 ([129, 520])"),
    (("buffer: w,", "buffer: q,"), "tensor map w_map: buffer 'q' is not a task argument (x, w, y)"),
    (("name: w_map", "name: M"), "tensor map 'M' has the name of a task argument or size"),
    (("cluster: [CL, 1]", "cluster: [4, 4]"), "k: a cluster of (4, 4, 1) is 16 blocks (at most 8)"),
    (("cluster: [CL, 1]", "cluster: [16]"), "k cluster.x = 16"),
    (("cluster: [CL, 1]", "cluster: [0]"), "k cluster.x = 0"),
])
def test_plan_refusals_of_declarations(edit: tuple[str, str], words: str) -> None:
    with pytest.raises(SpecError) as exc:
        gemm(GEMM.replace(*edit), CL=1)
    assert words in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_maps_and_clusters_need_hopper() -> None:
    a100 = named(hardware_config("a100"))
    t = task("hgemm")
    with pytest.raises(SpecError, match=r"^tensor maps need a GPU of sm_90 \(Hopper\) or newer; "
                                        r"this one is sm_80$"):
        make_plan(parse_spec(GEMM), t, SIZES, DEFAULT, a100)
    clustered = parse_spec(CLUSTER_IDS)
    with pytest.raises(SpecError, match=r"^thread-block clusters need a GPU of sm_90"):
        make_plan(clustered, t, SIZES, clustered.default, a100)


TOO_MANY = "tensor_maps:\n" + "".join(f"  - {{name: m{i}, buffer: x, box: [8]}}\n" for i in range(9))


@pytest.mark.parametrize(("maps", "words"), [
    ("tensor_maps: {x_map: 1}\n", "'tensor_maps' must be a list of at most 8"),
    (TOO_MANY, "'tensor_maps' must be a list of at most 8"),
    ("tensor_maps: [7]\n", "tensor_maps[0] must be a mapping {name, buffer, box, swizzle, when}"),
    ("tensor_maps: [{name: m, buffer: x, box: [8], mode: tiled}]\n",
     "unknown key(s) ['mode'] in tensor_maps[0]"),
    ("tensor_maps: [{name: m, buffer: x}]\n", "tensor_maps[0]: 'box' is required"),
    ("tensor_maps: [{name: m, box: [8]}]\n", "tensor_maps[0]: 'buffer' is required"),
    ("tensor_maps: [{name: 'm; x', buffer: x, box: [8]}]\n",
     "tensor map name 'm; x' is not a valid identifier"),
    ("tensor_maps: [{name: m, buffer: 'x[0]', box: [8]}]\n", "is not a valid identifier"),
    ("tensor_maps: [{name: m, buffer: x, box: 8}]\n",
     "tensor map m: 'box' must be a list of 1 to 5 expressions"),
    ("tensor_maps: [{name: m, buffer: x, box: []}]\n", "tensor map m: 'box' must be a list of 1 to 5"),
    ("tensor_maps: [{name: m, buffer: x, box: [1, 1, 1, 1, 1, 1]}]\n", "'box' must be a list of 1 to 5"),
    ("tensor_maps: [{name: m, buffer: x, box: [[8]]}]\n", "'box' must be a list of 1 to 5"),
    ("tensor_maps: [{name: m, buffer: x, box: [8], swizzle: 16}]\n",
     "tensor map m: swizzle must be none, 32, 64 or 128 (bytes) or an expression of the tunables, not 16"),
    ("tensor_maps: [{name: m, buffer: x, box: [8], swizzle: true}]\n", "swizzle must be none, 32, 64 or 128"),
    ("tensor_maps: [{name: m, buffer: x, box: [8], swizzle: [128]}]\n",
     "swizzle must be none, 32, 64 or 128"),
    ("tensor_maps: [{name: m, buffer: x, box: [8], when: true}]\n",
     "tensor map m: 'when' must be a condition"),
    ("tensor_maps: [{name: m, buffer: x, box: [8]}, {name: m, buffer: y, box: [8]}]\n",
     "tensor map 'm' is declared twice"),
    ("tensor_maps: [{name: B, buffer: x, box: [8]}]\n",
     "tensor map 'B' has the name of a tunable or scratch buffer"),
    ("tensor_maps: [{name: m, buffer: x, box: ['__import__(1)']}]\n", "not allowed"),
])
def test_malformed_tensor_maps_have_one_clear_line(maps: str, words: str) -> None:
    source = maps + "kernels: [{name: k, grid: 1, block: B, args: [m]}]\n" \
                    "tunables: {B: {values: [32], default: 32}}\n"
    with pytest.raises(SpecError) as exc:
        parse_spec(f"/*@evolve\n{source}*/\n")
    assert words in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


@pytest.mark.parametrize(("cluster", "words"), [
    ("[1, 1, 1, 1]", "kernels[0].cluster must be an expression or a list of 1 to 3 expressions"),
    ("{x: 2}", "kernels[0].cluster must be an expression or a list of 1 to 3"),
    ("[2, null]", "kernels[0].cluster must be an expression or a list of 1 to 3"),
])
def test_malformed_clusters_have_one_clear_line(cluster: str, words: str) -> None:
    with pytest.raises(SpecError, match=words.replace("[", r"\[").replace(".", r"\.")):
        parse_spec(f"/*@evolve\nkernels: [{{name: k, grid: 8, block: 32, cluster: {cluster}, "
                   "args: []}]\n*/\n")


def test_a_cubin_that_takes_a_grid_constant_tensor_map_passes_the_parameter_check() -> None:
    """ptxas starts the parameters where the constant bank's parameter area is (0x210 on sm_90),
    so a 64-aligned CUtensorMap sits at offset 48 of it: the check lays them out the same way."""
    nvrtc_or_skip()
    t = load_task(read_task_file(TASK_FILE))
    for source in (TILE_COPY, TMA_OUTSIDE):
        v = Variant.parse(source)
        cubin = compile_cuda(source, v.spec.default, "sm_90a", cache=False).cubin
        info = inspect(cubin)
        (kernel,) = info.params
        assert info.params[kernel][0].size == ARG_BYTES["tensor_map"] == 128
        assert info.params[kernel][0].offset % 16 == 0
        plan = make_plan(v.spec, t, {"rows": 37, "cols": 100}, v.spec.default, H200)
        assert param_mismatch(plan, info) is None


TYPES = """struct alignas(64) TensorMap { unsigned long long bits[16]; };
struct Loose { unsigned long long bits[16]; };
struct alignas(64) Half { unsigned long long bits[8]; };
"""
MAP_SPEC = """/*@evolve
tensor_maps: [{name: x_map, buffer: x, box: [32, 8]}]
kernels: [{name: k, grid: 1, block: 32, args: [out, x_map, rows]}]
*/
"""


@pytest.mark.parametrize(("params", "words"), [
    ("float* out, const __grid_constant__ TensorMap m, int rows", None),
    ("float* out, const float* m, int rows",
     "takes 3 parameters (8, 8, 4 bytes) but the spec passes 3 (8, 128, 4"),
    ("float* out, const __grid_constant__ Loose m, int rows",  # 8-aligned: at offset 8, not 48
     "(8, 128, 4 bytes) but the spec passes 3 (8, 128, 4"),
    ("float* out, const __grid_constant__ Half m, int rows", "(8, 64, 4 bytes)"),
    ("float* out, const __grid_constant__ TensorMap m, int rows, int extra", "takes 4 parameters"),
    ("float* out, const __grid_constant__ TensorMap m, long long rows", "(8, 128, 8 bytes)"),
])
def test_the_parameter_check_wants_a_64_aligned_128_byte_map_where_the_spec_passes_one(
        params: str, words: str | None) -> None:
    nvrtc_or_skip()
    t = load_task(read_task_file(TASK_FILE))
    source = MAP_SPEC + TYPES + f'extern "C" __global__ void k({params}) {{}}\n'
    info = inspect(compile_cuda(source, {}, "sm_90a", cache=False).cubin)
    reason = param_mismatch(make_plan(parse_spec(source), t, {"rows": 37, "cols": 100}, {}, H200), info)
    if words is None:
        assert reason is None
    else:
        assert reason is not None and words in reason, reason
        assert "CUtensorMap (128 bytes, 64-aligned)" in reason


def test_a_map_where_the_spec_passes_a_pointer_is_refused() -> None:
    nvrtc_or_skip()
    t = load_task(read_task_file(TASK_FILE))
    source = MAP_SPEC.replace("args: [out, x_map, rows]", "args: [out, x, rows]") + TYPES + \
        'extern "C" __global__ void k(float* out, const __grid_constant__ TensorMap m, int rows) {}\n'
    info = inspect(compile_cuda(source, {}, "sm_90a", cache=False).cubin)
    reason = param_mismatch(make_plan(parse_spec(source), t, {"rows": 37, "cols": 100}, {}, H200), info)
    assert reason is not None and "(8, 128, 4 bytes) but the spec passes 3 (8, 8, 4 bytes" in reason
    assert "CUtensorMap" not in reason  # the message of a spec without maps is today's


def test_the_test_kernels_compile_for_sm90_and_plan_at_every_size() -> None:
    nvrtc_or_skip()
    t = load_task(read_task_file(TASK_FILE))
    for source in (TILE_COPY, CLUSTER_IDS):
        v = Variant.parse(source)
        for cfg in v.spec.space():
            info = inspect(compile_cuda(source, cfg, "sm_90", cache=False).cubin)
            for sizes in t.correctness_sizes:
                assert param_mismatch(make_plan(v.spec, t, sizes, cfg, H200), info) is None
    cfg = {"BX": 4, "BY": 8, "CLUSTER": 2, "SW": 0}
    plan = make_plan(parse_spec(TILE_COPY), t, {"rows": 5, "cols": 7}, cfg, H200)
    assert plan.tensor_maps == () and plan.calls[0].args[0] == ("tensor_map", "x_map")
    assert plan.calls[0].grid == (2, 1, 1) and plan.calls[0].cluster == (2, 1, 1)
    with pytest.raises(SpecError, match=r"x's dimension 1 \(innermost first\) has a stride of 28 bytes"):
        make_plan(parse_spec(TMA_OUTSIDE), t, {"rows": 5, "cols": 7}, {"BX": 32, "BY": 8}, H200)


def test_the_export_names_maps_and_clusters() -> None:
    t = load_task(read_task_file(TASK_FILE))
    v = Variant.parse(TILE_COPY)
    (calls,) = _launches(v, t, H200, {"BX": 32, "BY": 8, "CLUSTER": 2, "SW": 0}).values()
    assert calls == [{"kernel": "tile_copy", "grid": (32, 128, 1), "block": (128, 1, 1), "shared_bytes": 2048,
                      "args": ["x_map", "x", "out", 1024, 1024], "cluster": (2, 1, 1)}]


@pytest.mark.parametrize("name", TASKS)
def test_seeds_without_maps_or_clusters_plan_as_before(name: str) -> None:
    """Seeds that declare neither (all but the gemm16 Hopper seed): their plans carry none, every
    argument is a pointer or an int32 laid out at its natural alignment from offset 0 (CuPy's
    launch path, as before)."""
    t = task(name)
    for v in t.seeds():
        if v.spec.tensor_maps or any(launch.cluster for launch in v.spec.launches):
            assert v.name == "hopper", v.name
            continue
        assert v.spec.tensor_maps == () and all(launch.cluster is None for launch in v.spec.launches)
        assert "tensor_maps" not in v.spec.canonical() and "cluster" not in v.spec.canonical()
        plan = make_plan(v.spec, t, t.correctness_sizes[0], v.spec.default, H200)
        assert plan.tensor_maps == () and all(c.cluster is None for c in plan.calls)
        assert {kind for c in plan.calls for kind, _ in c.args} <= {"buffer", "int32"}


@pytest.mark.parametrize("name", ["hgemm", "bgemm"])
def test_the_hopper_seed_gets_maps_over_x_and_w_a_persistent_grid_and_its_cluster(name: str) -> None:
    t = task(name)
    (v,) = [v for v in t.seeds() if v.name == "hopper"]
    big = t.timing_sizes[0]
    plan = make_plan(v.spec, t, big, {**v.spec.default, "CM": 2}, H200)
    x, w = plan.tensor_maps
    assert (x.buffer, x.dims, x.box, x.swizzle) == ("x", (4096, 4096), (64, 128), 128)
    assert (w.buffer, w.box) == ("w", (64, 128))  # each block of a pair fetches half of the w tile
    (call,) = plan.calls
    assert call.grid == (132, 1, 1) and call.cluster == (2, 1, 1)  # 66 pairs of 128 x 256 tiles
    ragged = make_plan(v.spec, t, {"M": 129, "N": 67, "K": 520}, v.spec.default, H200)
    assert ragged.calls[0].grid == (2, 1, 1)  # one pair of blocks: 129 rows are one 256-row pair tile
    # K % 8 != 0: no maps are made, the kernel gets zeros and takes its plain path
    assert make_plan(v.spec, t, {"M": 129, "N": 67, "K": 257}, v.spec.default, H200).tensor_maps == ()
