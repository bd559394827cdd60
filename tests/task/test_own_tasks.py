"""A user's own task, from a folder of their own: found by path or by ``--config-dir``, its seeds
and reference resolved relative to the task file, errors shown as they are, ``evolve tasks``.

The tasks come from ``tests/own_tasks/`` (the repository does not ship them as tasks) and are
copied to a temporary folder outside the repository; every command runs from somewhere else.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from evolve.errors import EvolveError
from evolve.paths import ROOT
from evolve.task.files import read_task_file
from evolve.task.task import load_task
from tests.helpers.runs import cli

OWN = Path(__file__).parents[1] / "own_tasks"


def own_task(name: str, where: Path) -> Path:
    """Copy one of the test's own tasks into ``where``; the path of its YAML file."""
    shutil.copytree(OWN / name, where / name)
    return where / name / f"{name}.yaml"


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's folder of tasks, and a different working directory."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path / "tasks"


def test_seeds_and_reference_resolve_relative_to_the_task_file(elsewhere: Path) -> None:
    path = own_task("row_argmax", elsewhere)
    t = load_task(read_task_file(path))
    assert t.seed_paths == (path.parent / "naive.cu",)
    assert t.reference.__module__ == "refs" and Path(sys.modules["refs"].__file__) == path.parent / "refs.py"
    x = t.make_inputs(np, t.correctness_sizes[1], 3)
    assert np.array_equal(t.expected(np, x, t.correctness_sizes[1])["idx"], np.argmax(x["x"], axis=1))


def test_a_process_that_rebuilds_the_task_from_its_config_finds_everything(elsewhere: Path) -> None:
    """As the GPU worker does: a fresh interpreter, another working directory, no PYTHONPATH."""
    path = own_task("row_argmax", elsewhere)
    config = load_task(read_task_file(path)).config
    code = ("import json, sys; from evolve.task.task import load_task; "
            "t = load_task(json.loads(sys.argv[1])); "
            "print(t.reference.__module__, t.seed_paths[0])")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(config)], capture_output=True, text=True,
                         cwd="/", env={"PATH": "/usr/bin:/bin"}, check=True)
    assert out.stdout.split() == ["refs", str(path.parent / "naive.cu")]


def test_two_tasks_with_a_module_of_the_same_name_each_get_their_own(elsewhere: Path) -> None:
    first = load_task(read_task_file(own_task("row_argmax", elsewhere)))
    other = elsewhere / "other"
    shutil.copytree(elsewhere / "row_argmax", other)
    (other / "refs.py").write_text("def row_argmax(xp, x, s):\n"
                                   "    return {'idx': xp.argmin(x['x'], axis=1)}\n")
    second = load_task(read_task_file(other / "row_argmax.yaml"))
    x = {"x": np.array([[1.0, 3.0, 2.0]])}
    assert first.reference(np, x, {})["idx"][0] == 1
    assert second.reference(np, x, {})["idx"][0] == 0


@pytest.mark.parametrize(("refs", "message"), [
    ("raise ValueError('the user wrote this')\n",
     r"importing reference module 'refs' failed: ValueError: the user wrote this \(.*refs.py:1\)"),
    ("import no_such_module_here\n",
     r"failed: ModuleNotFoundError: No module named 'no_such_module_here' \(.*refs.py:1\)"),
    ("def row_argmax(xp, x, s)\n", r"failed: SyntaxError: .*refs.py:1\)"),
    ("def something_else(xp, x, s):\n    pass\n", r"refs \(.*refs.py\) has no function 'row_argmax'"),
    (None, r"reference module 'refs' not found \(looked in .*row_argmax and the Python path\)"),
])
def test_import_errors_are_shown_as_they_are(elsewhere: Path, refs: str | None, message: str) -> None:
    path = own_task("row_argmax", elsewhere)
    sys.modules.pop("refs", None)
    if refs is None:
        (path.parent / "refs.py").unlink()
    else:
        (path.parent / "refs.py").write_text(refs)
    with pytest.raises(EvolveError, match=message):
        load_task(read_task_file(path))


def test_a_missing_seed_says_where_it_was_looked_for(elsewhere: Path) -> None:
    cfg = read_task_file(own_task("row_argmax", elsewhere))
    with pytest.raises(EvolveError, match=r"seed kernel 'nope.cu' not found \(looked in .*row_argmax, "):
        load_task({**cfg, "seeds": ["nope.cu"]})


def test_the_folder_is_not_part_of_the_task_identity(elsewhere: Path) -> None:
    path = own_task("row_argmax", elsewhere)
    moved = shutil.copytree(path.parent, elsewhere / "moved")
    a = load_task(read_task_file(path))
    b = load_task(read_task_file(moved / path.name))
    assert a.config["dir"] != b.config["dir"] and a.fingerprint() == b.fingerprint()


def test_the_command_line_takes_a_task_file_by_path(elsewhere: Path) -> None:
    path = own_task("row_argmax", elsewhere)
    for arg in (str(path), f"../tasks/row_argmax/{path.name}"):
        out = cli("--cfg", "job", f"task={arg}")
        assert out.returncode == 0, out.stderr
        cfg = yaml.safe_load(out.stdout)["task"]
        assert cfg["name"] == "row_argmax" and cfg["dir"] == str(path.parent)


def test_config_dir_tasks_resolve_relative_to_their_file(elsewhere: Path) -> None:
    shutil.copytree(OWN / "row_argmax", elsewhere / "task")
    (elsewhere / "task" / "row_argmax.yaml").rename(elsewhere / "task" / "argmax_cd.yaml")
    out = cli("--config-dir", str(elsewhere), "task=argmax_cd", "backend=replay", "hardware=h200")
    # the task loaded (seed and reference found beside the file): the replay backend is what stops
    assert "no recorded measurements for task row_argmax" in out.stderr, out.stderr


def test_a_task_path_that_is_not_a_file_is_one_line(elsewhere: Path) -> None:
    out = cli("task=nowhere/x.yaml")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == "evolve: task file nowhere/x.yaml not found"
    out = cli(f"task={elsewhere}")
    assert out.returncode == 2 and out.stderr.strip().endswith("(it is a folder: name the YAML file in it)")


def test_evolve_tasks_lists_the_built_in_and_the_found(elsewhere: Path) -> None:
    own_task("row_argmax", elsewhere)
    broken = shutil.copytree(elsewhere / "row_argmax", elsewhere / "broken")
    (broken / "row_argmax.yaml").write_text((broken / "row_argmax.yaml").read_text()
                                            .replace("name: row_argmax", "name: broken")
                                            .replace("seeds: [naive.cu]", "seeds: [gone.cu]"))
    (elsewhere / "notes.yaml").write_text("just: data\n")  # not a task: not listed
    (elsewhere / "ops").mkdir()
    shutil.copy(ROOT / "tests/torch_problems/gelu.py", elsewhere / "ops" / "gelu.py")  # a PyTorch problem
    (elsewhere / "ops" / "helper.py").write_text("def get_inputs():\n    return []\n")  # no Model: not one
    out = cli("tasks", str(elsewhere))
    assert out.returncode == 1, out.stderr  # one task has a problem
    lines = out.stdout.splitlines()
    assert any(ln.split()[:2] == ["softmax", "2"] for ln in lines)
    assert any(ln.split()[:2] == ["row_argmax", str(elsewhere / "row_argmax/row_argmax.yaml")]
               and ln.endswith("1 seed") for ln in lines), out.stdout
    assert any("broken" in ln and "PROBLEM" in ln and "gone.cu" in ln for ln in lines), out.stdout
    assert "notes" not in out.stdout and "helper" not in out.stdout
    assert any(ln.split()[:2] == ["gelu", str(elsewhere / "ops/gelu.py")] and "PyTorch problem file" in ln
               for ln in lines), out.stdout


def test_an_unknown_task_name_lists_the_tasks_there_are(elsewhere: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    own_task("row_argmax", elsewhere)
    monkeypatch.chdir(elsewhere)
    out = cli("task=row_argmax")  # a file here, but named without its path
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == (
        "evolve: unknown task 'row_argmax': built-in tasks: bgemm, hgemm, layernorm, reduce_sum, sgemm, "
        "softmax, transpose, vector_add; task files here: row_argmax/row_argmax.yaml (a task file is named "
        "by its path: task=path/to/op.yaml)")
    assert cli("-m", "task=softmax,nope").stderr.startswith("evolve: unknown task 'nope'")
    (elsewhere / "ops").mkdir()  # a PyTorch problem file is a task file too
    shutil.copy(ROOT / "tests/torch_problems/gelu.py", elsewhere / "ops" / "gelu.py")
    typo = cli("task=sofmax").stderr.strip()
    assert typo.startswith("evolve: unknown task 'sofmax' (did you mean softmax?): built-in tasks:"), typo
    assert "task files here: row_argmax/row_argmax.yaml, ops/gelu.py (" in typo, typo


def test_a_config_dir_task_with_a_built_in_name_is_the_users(elsewhere: Path) -> None:
    """Issue 28.1: DIR/task/hgemm.yaml is the task asked for, not the built-in hgemm."""
    shutil.copytree(OWN / "row_argmax", elsewhere / "task")
    (elsewhere / "task" / "row_argmax.yaml").rename(elsewhere / "task" / "hgemm.yaml")
    for args in (("--config-dir", str(elsewhere)), (f"--config-dir={elsewhere}",), ("-cd", str(elsewhere))):
        out = cli("--cfg", "job", *args, "task=hgemm")
        assert out.returncode == 0, out.stderr
        cfg = yaml.safe_load(out.stdout)["task"]
        own = yaml.safe_load((elsewhere / "task" / "hgemm.yaml").read_text())
        assert sorted(cfg["args"]) == sorted(own["args"])
        assert cfg["dir"] == str((elsewhere / "task").resolve())


def test_without_a_gpu_a_task_of_ones_own_is_pointed_to_the_check(elsewhere: Path) -> None:
    """Issue 28.5: no recordings exist for it, so not the replay: the check, with its path."""
    if shutil.which("nvidia-smi") and "GPU " in subprocess.run(
            ["nvidia-smi", "--list-gpus"], capture_output=True, text=True).stdout:
        pytest.skip("this machine has a GPU")
    path = own_task("row_argmax", elsewhere)
    out = cli(f"task={path}", "llm=none")
    assert out.returncode == 2, out.stderr
    assert f"Without a GPU, check the task (reference, seeds, compiles): evolve task={path} backend=check" \
        in out.stderr and "backend=replay" not in out.stderr, out.stderr


def test_a_broken_task_file_is_found_and_said_with_its_line(elsewhere: Path) -> None:
    """Issue 28.8: line and column of the YAML error; `evolve tasks` lists the file (two levels down
    too); a path that does not exist names the file meant."""
    (elsewhere / "ops").mkdir()
    path = own_task("row_argmax", elsewhere / "ops")  # tasks/ops/row_argmax/row_argmax.yaml
    text = path.read_text().replace("seeds: [naive.cu]", "seeds: [naive.cu")
    path.write_text(text)
    line = 1 + text[:text.index("seeds: [naive.cu")].count("\n")
    with pytest.raises(EvolveError, match=rf"{path}:{line + 1}:1: not valid YAML: expected ',' or ']'.* "
                                          rf"\(while parsing a flow sequence at {line}:8\)"):
        read_task_file(path)
    out = cli("tasks", str(elsewhere))
    assert out.returncode == 1
    assert any(str(path) in ln and f"PROBLEM: task file {path}:{line + 1}:1: not valid YAML" in ln
               for ln in out.stdout.splitlines()), out.stdout
    out = cli(f"task={path.with_suffix('.yml')}")
    assert out.stderr.strip() == (f"evolve: task file {path.with_suffix('.yml')} not found "
                                  f"(did you mean {path}?)")
