"""The package's shape, checked from its source: one direction of imports, Optuna's private API
in one module, modules a reader can hold in their head."""

from __future__ import annotations

import ast
import re

from evolve.paths import PACKAGE_DIR, ROOT

MODULES = {
    ".".join(p.relative_to(PACKAGE_DIR.parent).with_suffix("").parts).removesuffix(".__init__"): p
    for p in PACKAGE_DIR.rglob("*.py")
}


def imports(module: str) -> set[str]:
    """Every package module the module imports, wherever the import is (a function, a
    ``TYPE_CHECKING`` block): a cycle hidden there is still a cycle for the reader."""
    out = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in MODULES}
        elif isinstance(node, ast.ImportFrom) and node.module in MODULES:
            out |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                    for a in node.names}
    return out - {module}


def test_no_import_cycles() -> None:
    graph = {m: imports(m) for m in MODULES}
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> None:
        if m in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(m):], m]))
        if m not in done:
            for n in sorted(graph[m]):
                visit(n, [*path, m])
            done.add(m)

    for m in sorted(graph):
        visit(m, [])


def test_the_loop_is_imported_by_the_cli_only() -> None:
    """The record is read through evolve.record; the proposer works on the ledger."""
    assert {m for m in MODULES if "evolve.search" in imports(m)} == {"evolve.cli"}
    for m in ("evolve.evolution", "evolve.proposing", "evolve.export", "evolve.lineage", "evolve.verify"):
        assert "evolve.search" not in imports(m), m


# private names of Optuna's (not its dunders, such as optuna.__version__)
PRIVATE = re.compile(r"\._storage\b|\._trial_id\b|[\"']fixed_params[\"']|optuna(\.\w+)*\._(?!_)\w+")


def test_optunas_private_api_is_used_in_one_module() -> None:
    users = {m for m, p in MODULES.items() if PRIVATE.search(p.read_text())}
    assert users == {"evolve.record"}, users


def test_no_module_is_over_400_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in MODULES.values()
            if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long
