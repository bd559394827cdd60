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


# The packages in the order data flows: each imports only the leaves, itself and packages before it.
LEAVES = {"evolve", "evolve.errors", "evolve.paths", "evolve.settings", "evolve.dtypes", "evolve.expr",
          "evolve.hardware", "evolve.writable", "evolve.markup"}
LAYERS = ["kernel", "task", "evaluate", "record", "search", "evolution", "results", "app"]
TOP = {"evolve.cli", "evolve.__main__"}  # and evolve.bench, beside the app


def layer(module: str) -> int:
    """0 for the leaves, 1.. for the packages in LAYERS, past them for the commands."""
    if module in LEAVES:
        return 0
    if module in TOP or module.startswith("evolve.bench"):
        return len(LAYERS) + 1
    package = module.split(".")[1]
    assert package in LAYERS, f"{module} is in no layer: add its package to LAYERS or LEAVES"
    return LAYERS.index(package) + 1


def test_every_module_is_in_a_layer() -> None:
    for m in MODULES:
        layer(m)


def test_imports_go_down_the_layers_only() -> None:
    upward = sorted(f"{m} -> {n}" for m in MODULES for n in imports(m) if layer(n) > layer(m))
    assert not upward, "imports against the data flow:\n" + "\n".join(upward)


def test_the_leaves_import_only_leaves() -> None:
    assert not {f"{m} -> {n}" for m in LEAVES for n in imports(m) if n not in LEAVES}


def test_the_gpu_worker_package_is_imported_by_the_evaluators_only() -> None:
    """What runs in the worker process (evaluate/gpu) is reached through a backend, never by the
    search or the proposer."""
    users = {m for m in MODULES for n in imports(m) if n.startswith("evolve.evaluate.gpu")
             and not m.startswith(("evolve.evaluate", "evolve.bench"))}
    best_py = {"evolve.results.usage", "evolve.results.fastcall"}  # launches in the user's process
    assert users <= {*best_py, "evolve.app.check", "evolve.app.run"}, users


def test_the_loop_is_imported_by_the_run_s_assembly_only() -> None:
    """The record is read through evolve.record.schema; the proposer works on the ledger."""
    assert {m for m in MODULES if "evolve.search.loop" in imports(m)} == {"evolve.app.run"}


# private names of Optuna's (not its dunders, such as optuna.__version__)
PRIVATE = re.compile(r"\._storage\b|\._trial_id\b|[\"']fixed_params[\"']|optuna(\.\w+)*\._(?!_)\w+")


def test_optunas_private_api_is_used_in_one_module() -> None:
    users = {m for m, p in MODULES.items() if PRIVATE.search(p.read_text())}
    assert users == {"evolve.record.schema"}, users


def test_no_module_is_over_400_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in MODULES.values()
            if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long
