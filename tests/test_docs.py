"""The documentation: the site builds with ``mkdocs build --strict``, where a broken link or anchor, or a
page left out of the navigation, fails the build; the README stays short, its links resolve and its test
command is the one CI runs. Skips without MkDocs unless EVOLVE_REQUIRE_DOCS is set (CI sets it)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evolve.paths import ROOT

README = ROOT / "README.md"


def need_mkdocs() -> None:
    if importlib.util.find_spec("mkdocs") and importlib.util.find_spec("material"):
        return
    if os.environ.get("EVOLVE_REQUIRE_DOCS"):
        pytest.fail("MkDocs with the Material theme is required (EVOLVE_REQUIRE_DOCS) but not installed")
    pytest.skip('needs MkDocs and the Material theme: pip install -e ".[docs]"')


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner about MkDocs 2: not a warning
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    need_mkdocs()
    out = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "WARNING" not in out.stderr, out.stderr
    for page in ("own-task", "judging", "layout", "real-model/profile-ab"):
        assert (tmp_path / "site" / page / "index.html").is_file(), page


@pytest.mark.parametrize(("pages", "nav", "problem"), [
    ({"index.md": "[gone](missing.md)\n"}, ["index.md"], "not found among documentation files"),
    ({"index.md": "[gone](other.md#nowhere)\n", "other.md": "# Other\n"}, ["index.md", "other.md"],
     "does not contain an anchor '#nowhere'"),
    ({"index.md": "# Home\n", "orphan.md": "# Orphan\n"}, ["index.md"], 'not included in the "nav"'),
])
def test_the_project_settings_fail_a_broken_link_or_a_page_left_out(
        tmp_path: Path, pages: dict[str, str], nav: list[str], problem: str) -> None:
    """The project's own mkdocs.yml (inherited) turns each of these into a failed build."""
    need_mkdocs()
    (tmp_path / "docs").mkdir()
    for name, text in pages.items():
        (tmp_path / "docs" / name).write_text(text)
    entries = "".join(f"  - {name}\n" for name in nav)
    config = tmp_path / "mkdocs.yml"
    config.write_text(f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: docs\nnav:\n{entries}")
    out = build(config, tmp_path / "site")
    assert out.returncode != 0 and problem in out.stderr, out.stderr


def test_the_readme_is_short_and_its_links_resolve() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    links = [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", t)]
    assert links, "the README links to the docs pages"
    missing = [t for t in links if not (ROOT / t.split("#")[0]).exists()]
    assert not missing, missing


def test_the_readme_shows_the_test_command_ci_runs() -> None:
    """.ci/run runs the README's test command verbatim: the two must stay the same line."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    command = ci[ci.index("# The README's test command, verbatim:") + 1]
    quick = README.read_text().split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    assert command in quick.splitlines()
