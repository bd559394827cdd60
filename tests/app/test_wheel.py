"""A plain wheel (``pip install .``, not ``-e``) carries what the package reads at run time: its
configuration, seed kernels, prompt templates and recordings. Built here, installed into a fresh
virtual environment and run from an empty folder, it must find its tasks."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from evolve.paths import ROOT


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding only the built wheel; its dependencies are seen through a .pth file
    naming this environment's site-packages (no downloads; this checkout's editable finder, a .pth
    of that folder, is not run)."""
    tmp = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp / "dist"), str(ROOT)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    assert "deprecat" not in build.stderr.lower(), build.stderr[-3000:]
    wheel = next((tmp / "dist").glob("cuda_evolve-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    target = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; "
                                  "print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True,
                                 check=True).stdout.strip())
    deps = [p for p in {*site.getsitepackages(), sysconfig.get_paths()["purelib"]} if Path(p).is_dir()]
    (target / "deps.pth").write_text("\n".join(deps) + "\n")
    inst = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                           "-q", "--no-deps", "--no-index", "--ignore-installed", str(wheel)],
                          capture_output=True, text=True)
    assert inst.returncode == 0, inst.stderr[-3000:]
    return venv


def test_the_installed_wheel_runs_the_main_job_from_an_empty_folder(installed: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run([str(installed / "bin" / "python"), "-c", "import evolve; print(evolve.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, env=env, check=True).stdout
    assert str(installed) in where and str(ROOT) not in where, where  # the wheel's, not this checkout's
    evolve = str(installed / "bin" / "evolve")
    out = subprocess.run([evolve, "task=softmax", "backend=replay", "hardware=h200", "search.progress=false"],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    runs = list((tmp_path / "runs").glob("*/best.cu"))
    assert runs, list((tmp_path / "runs").rglob("*"))
    listed = subprocess.run([str(installed / "bin" / "evolve"), "tasks"], capture_output=True, text=True,
                            cwd=tmp_path, env=env)
    assert listed.returncode == 0 and "softmax" in listed.stdout and "hgemm" in listed.stdout, listed
