"""The lineage exports, from a real study: SQLite storage, an artifact store and stored variants."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.artifacts import FileSystemArtifactStore
from optuna.distributions import IntDistribution
from optuna.trial import TrialState, create_trial

from evolve.kernel.spec import Variant
from evolve.paths import KERNELS_DIR
from evolve.record.variants import VariantStore
from evolve.results.lineage import Row, lineage_rows, write_lineage

SVG = "{http://www.w3.org/2000/svg}"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SOFTMAX = KERNELS_DIR / "softmax"
LONG_REASON = "line 3: error | expected ';' \x1b[31mbefore\x1b[0m '}' " + "x" * 200


@pytest.fixture
def store(tmp_path: Path) -> VariantStore:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    study = optuna.create_study(study_name="lineage-test", storage=f"sqlite:///{tmp_path}/t.db")
    return VariantStore(study, FileSystemArtifactStore(str(artifacts)))


def seed(store: VariantStore, file: str, island: int = 0) -> Variant:
    v = Variant.parse((SOFTMAX / file).read_text(), name=Path(file).stem)
    assert store.add(v, operator="seed", parents=[], island=island)
    return v


def child(store: VariantStore, name: str, base: Variant, operator: str, parents: list[Variant]) -> Variant:
    """A variant whose code (not just a comment) differs from ``base``, so its id differs."""
    v = Variant.parse(base.source + f"\n__device__ int lineage_{name};\n", name=name)
    assert store.add(v, operator=operator, parents=[p.id for p in parents], island=0, model="m", tokens=10)
    return v


def trial(store: VariantStore, v: Variant, operator: str, ms: float | None = None, iqr: float = 0.0,
          status: str | None = None, reason: str = "") -> None:
    attrs: dict[str, Any] = {
        "variant": v.id, "variant_name": v.name, "operator": operator,
        "parents": store.meta[v.id].parents, "status": status or ("ok" if ms is not None else "wrong"),
    }
    if ms is not None:
        attrs |= {"iqr_ms": iqr, "gbps": 100.0, "bandwidth_fraction": 0.1}
    if reason:
        attrs["reason"] = reason
    store.study.add_trial(create_trial(
        params={"BLOCK": 256}, distributions={"BLOCK": IntDistribution(32, 1024)}, value=ms,
        state=TrialState.COMPLETE if ms is not None else TrialState.FAIL, user_attrs=attrs,
    ))


@pytest.fixture
def family(store: VariantStore) -> dict[str, Variant]:
    """Two seeds and five children: an improvement, a faster child within noise, a crossover
    improvement, a child that never compiles, and its repair."""
    a, b = seed(store, "naive.cu"), seed(store, "block_row.cu", island=1)
    trial(store, a, "seed", 10.0, 0.1)
    trial(store, a, "tune", 8.0, 0.1)  # a's best: 8.0 ± 0.1
    trial(store, b, "seed", 2.0, 0.05)
    c = child(store, "c", a, "mutate", [a])
    trial(store, c, "mutate", 5.0, 0.1)  # 8.0 -> 5.0, noise 0.4: improvement
    d = child(store, "d", b, "mutate_diff", [b])
    trial(store, d, "mutate_diff", 1.9, 0.05)  # 2.0 -> 1.9, noise 0.2: within noise
    e = child(store, "e", c, "crossover", [c, b])
    trial(store, e, "crossover", 1.0, 0.02)  # against its first parent c: 5.0 -> 1.0
    f = child(store, "f", e, "mutate", [e])
    trial(store, f, "mutate", status="compile_error", reason=LONG_REASON)
    g = child(store, "g", e, "repair", [f])
    trial(store, g, "repair", 0.9, 0.02)  # its parent never ran: no speedup
    trial(store, g, "tune", status="interrupted")  # retried on resume: not counted
    trial(store, c, "tune", status="wrong", reason="max abs error 1e3")
    return {"a": a, "b": b, "c": c, "d": d, "e": e, "f": f, "g": g}


def table_rows(md: str) -> dict[str, list[str]]:
    """Table cells by variant name, split on unescaped pipes."""
    rows = [re.split(r"(?<!\\)\|", line)[1:-1] for line in md.splitlines() if line.startswith("| ")]
    return {cells[0].strip(): [c.strip() for c in cells] for cells in rows[1:]}


def svg_parts(path: Path) -> tuple[ET.Element, list[ET.Element], list[ET.Element]]:
    root = ET.parse(path).getroot()  # raises on malformed XML
    return root, root.findall(f".//{SVG}rect[@class='box']"), root.findall(f".//{SVG}path[@class='edge']")


def box_x(root: ET.Element, v: Variant) -> float:
    group = root.find(f".//{SVG}g[@id='v-{v.id}']")
    assert group is not None
    return float(group.find(f"{SVG}rect[@class='box']").get("x"))


def test_rows_follow_the_family_and_the_noise_rule(store: VariantStore, family: dict[str, Variant]) -> None:
    rows = {r.name: r for r in lineage_rows(store.study, store)}
    assert list(rows) == ["naive", "block_row", "c", "d", "e", "f", "g"]  # order of first appearance
    assert {n: r.operator for n, r in rows.items()} == {
        "naive": "seed", "block_row": "seed", "c": "mutate", "d": "mutate_diff", "e": "crossover",
        "f": "mutate", "g": "repair",
    }
    assert rows["e"].parent_names == ("c", "block_row")
    assert rows["e"].parents == (family["c"].id, family["b"].id)
    assert rows["naive"].parents == ()
    assert {n for n, r in rows.items() if r.improvement} == {"c", "e"}
    assert rows["d"].best_ms < rows["block_row"].best_ms and not rows["d"].improvement
    assert rows["naive"].best_ms == 8.0 and rows["naive"].trials == 2
    assert rows["c"].trials == 2 and rows["c"].best_ms == 5.0 and rows["c"].speedup == pytest.approx(1.6)
    assert rows["e"].speedup == pytest.approx(5.0) and rows["e"].best_trial == 5
    assert rows["g"].trials == 1 and rows["g"].speedup is None and not rows["g"].improvement
    assert (rows["f"].status, rows["f"].best_ms, rows["f"].reason) == ("compile_error", None, LONG_REASON)
    assert rows["c"].status == "ok" and rows["c"].reason == ""
    assert (rows["c"].model, rows["c"].tokens, rows["block_row"].island) == ("m", 10, 1)
    assert (rows["naive"].model, rows["naive"].tokens) == ("", None)


def test_write_lineage(store: VariantStore, family: dict[str, Variant], tmp_path: Path) -> None:
    paths = write_lineage(store.study, store, tmp_path / "run")
    assert paths == {"svg": tmp_path / "run" / "lineage.svg", "table": tmp_path / "run" / "lineage.md",
                     "curve": tmp_path / "run" / "evolution.png"}

    md = paths["table"].read_text()
    cells = table_rows(md)
    assert list(cells) == ["naive", "block_row", "c", "d", "e", "f", "g"]
    # variant, id, operator, parents, island, model, tokens, trials, best ms, speedup, improvement, failure
    assert cells["e"] == ["e", family["e"].id, "crossover", "c, block_row", "0", "m", "10", "1", "1", "5.00x",
                          "yes", ""]
    assert cells["d"][9:11] == ["1.05x", ""]
    assert cells["naive"][3:7] == ["-", "0", "-", "-"]
    failure = cells["f"][11]
    assert failure.startswith("compile_error: line 3: error &#124; expected") and "before '}'" in failure
    assert len(failure.removeprefix("compile_error: ").replace("&#124;", "|")) == 80
    assert cells["g"][9:] == ["-", "", ""]
    improvements = md.split("## Improvements")[1].strip().splitlines()
    assert improvements == ["- c (mutate of naive): 8 -> 5 ms (1.60x)",
                            "- e (crossover of c): 5 -> 1 ms (5.00x)"]

    root, boxes, edges = svg_parts(paths["svg"])
    assert len(boxes) == 7
    assert len(edges) == 6  # one per parent: the crossover has two
    assert box_x(root, family["a"]) == box_x(root, family["b"]) < box_x(root, family["c"])
    assert box_x(root, family["c"]) == box_x(root, family["d"]) < box_x(root, family["e"])
    assert box_x(root, family["e"]) < box_x(root, family["f"]) < box_x(root, family["g"])
    best = root.find(f".//{SVG}g[@id='v-{family['g'].id}']")
    assert best is not None and best.get("font-weight") == "bold"
    improved = {g.get("id") for g in root.iter(f"{SVG}g") if g.get("class") == "variant"
                and g.find(f"{SVG}rect[@class='box']").get("stroke") == "#2e7d32"}
    assert improved == {f"v-{family['c'].id}", f"v-{family['e'].id}"}
    assert paths["curve"].read_bytes().startswith(PNG_MAGIC)


def test_another_process_sees_the_same_lineage(store: VariantStore, family: dict[str, Variant],
                                               tmp_path: Path) -> None:
    """Read back from storage alone, as a resumed run or a separate export would."""
    study = optuna.load_study(study_name=store.study.study_name, storage=f"sqlite:///{tmp_path}/t.db")
    fresh = VariantStore(study, store.artifacts)
    fresh.load()
    assert lineage_rows(study, fresh) == lineage_rows(store.study, store)


def test_no_correct_trial(store: VariantStore, tmp_path: Path) -> None:
    a = seed(store, "naive.cu")
    trial(store, a, "seed", status="compile_error", reason="error: x")
    b = child(store, "b", a, "repair", [a])  # queued, never measured
    store.study.enqueue_trial({"BLOCK": 256}, user_attrs={"variant": b.id, "operator": "repair"})
    paths = write_lineage(store.study, store, tmp_path / "run")
    rows = lineage_rows(store.study, store)
    assert [(r.status, r.best_ms, r.trials) for r in rows] == [
        ("compile_error", None, 1), ("pending", None, 0)]
    cells = table_rows(paths["table"].read_text())
    assert cells["naive"][11] == "compile_error: error: x" and cells["b"][11] == "pending"
    assert "None beyond the noise." in paths["table"].read_text()
    _, boxes, edges = svg_parts(paths["svg"])
    assert (len(boxes), len(edges)) == (2, 1)
    assert paths["curve"].read_bytes().startswith(PNG_MAGIC)


def test_single_seed(store: VariantStore, tmp_path: Path) -> None:
    a = seed(store, "naive.cu")
    trial(store, a, "seed", 3.0, 0.1)
    paths = write_lineage(store.study, store, tmp_path)
    [row] = lineage_rows(store.study, store)
    assert isinstance(row, Row)
    assert (row.name, row.operator, row.best_ms, row.speedup, row.improvement) == (
        "naive", "seed", 3.0, None, False)
    assert table_rows(paths["table"].read_text())["naive"][8:] == ["3", "-", "", ""]
    _, boxes, edges = svg_parts(paths["svg"])
    assert (len(boxes), len(edges)) == (1, 0)
    assert paths["curve"].read_bytes().startswith(PNG_MAGIC)


def test_no_variants(store: VariantStore, tmp_path: Path) -> None:
    paths = write_lineage(store.study, store, tmp_path)
    assert lineage_rows(store.study, store) == []
    _, boxes, edges = svg_parts(paths["svg"])
    assert boxes == edges == []
    assert paths["curve"].read_bytes().startswith(PNG_MAGIC)


def test_many_variants_stay_in_a_readable_layout(store: VariantStore, tmp_path: Path) -> None:
    """Forty variants: no box overlaps another and every child lies right of its parents, even
    those of seeds that were never measured (so they are born after their children)."""
    family = [seed(store, "naive.cu"), seed(store, "block_row.cu")]
    for i in range(38):
        p = family[(i * 7) % len(family)]
        v = child(store, f"v{i}", p, "mutate", [p])
        trial(store, v, "mutate", 10.0 / (1 + i % 5), 0.01)
        family.append(v)
    root, boxes, edges = svg_parts(write_lineage(store.study, store, tmp_path)["svg"])
    assert (len(boxes), len(edges)) == (40, 38)
    assert len({(b.get("x"), b.get("y")) for b in boxes}) == 40
    for v in family:
        assert all(box_x(root, store.get(p)) < box_x(root, v) for p in store.meta[v.id].parents)


@pytest.mark.parametrize("times", [
    [10.0, 8.0, 2.0, 5.0, 1.9, 1.0, 0.9],  # across decades
    [0.2652, 0.2637, 0.2584, 0.2611, 0.2597],  # within one: a log locator labels nothing here
    [3.418, 3.244, 3.094, 3.044, 29.1, 24.6],  # under a decade, and linear ticks would miss the best
])
def test_the_evolution_curve_labels_every_time_in_plain_milliseconds(store: VariantStore,
                                                                     times: list[float]) -> None:
    """Its labels once mixed '1e−01', '2e−01', '1' and '3.1' on one axis."""
    from evolve.results.curve import evolution_figure

    v = seed(store, "naive.cu")
    for i, ms in enumerate(times):
        trial(store, v, "seed" if i == 0 else "tune", ms)
    trials = store.study.get_trials()
    fig = evolution_figure("curve", trials, [])
    fig.canvas.draw()
    ax = fig.axes[0]
    low, high = ax.get_ylim()
    shown = [label.get_text() for label in ax.get_yticklabels() + ax.get_yticklabels(minor=True)
             if label.get_text() and low <= label.get_position()[1] <= high]
    assert len(shown) >= 3 and len(set(shown)) == len(shown), shown
    assert all(re.fullmatch(r"\d+(\.\d+)?", text) for text in shown), shown
    values = [float(text) for text in shown]
    assert values == sorted(values) and values[0] <= 1.5 * min(times)  # a label near the best time
