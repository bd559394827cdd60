"""optuna-dashboard, started with the line of docs/getting-started.md, shows every trial and its kernel
source."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from evolve.task.task import builtin_task
from tests.helpers.runs import evolve


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read()


def test_dashboard_shows_trials_metrics_and_sources(in_tmp: Path) -> None:
    evolve("task=transpose", "run.name=dash", "search.n_trials=5")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).parent / "optuna-dashboard"
    server = subprocess.Popen(
        [str(exe), "sqlite:///runs/evolve.db", "--artifact-dir", "runs/artifacts",
         "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                studies = json.loads(_get(f"{base}/api/studies"))["study_summaries"]
                break
            except OSError:
                time.sleep(0.2)
        else:
            raise AssertionError("optuna-dashboard did not start")
        sid = next(s["study_id"] for s in studies if s["study_name"] == "dash")
        study = json.loads(_get(f"{base}/api/studies/{sid}?after=0"))
        assert study["objective_names"] == ["time_ms"]
        artifacts = {a["filename"]: a["artifact_id"] for a in study["artifacts"]}
        assert set(artifacts) == {"config.yaml", *(p.name for p in builtin_task("transpose").seed_paths)}
        config = _get(f"{base}/artifacts/{sid}/{artifacts['config.yaml']}").decode()
        assert "name: transpose" in config and "n_trials: 5" in config  # the whole configuration
        assert len(study["trials"]) == 5
        for t in study["trials"]:
            attrs = {a["key"]: a["value"] for a in t["user_attrs"]}
            assert t["state"] == "Complete" and t["values"] and t["params"]
            assert attrs["status"] == "ok" and float(attrs["gbps"]) > 0 and attrs["variant_name"]
            art = t["artifacts"][0]
            source = _get(f"{base}/artifacts/{sid}/{t['trial_id']}/{art['artifact_id']}").decode()
            assert art["filename"].endswith(".cu") and "__global__" in source
            for p in t["params"]:
                assert f"#define {p['name']} {p['param_external_value']}" in source
    finally:
        server.terminate()
        server.wait(timeout=10)
