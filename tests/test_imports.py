"""The project's own imports run down the layers only, and never in a circle.

Layers, top to bottom: app -> learner -> agents -> store. A module may import its own layer or
one below; store imports nothing of ours above it. Every import counts, lazy ones inside
functions included: a circle that only closes at run time still ties the modules together.
"""

from __future__ import annotations

import ast
import re
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["store", "agents", "learner", "app"]  # bottom to top


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {
        module_name(path): path for layer in LAYERS for path in sorted((ROOT / layer).rglob("*.py"))
    }


def imported(tree: ast.AST, modules: dict[str, Path]) -> set[str]:
    """The project modules a module's code imports anywhere in it (`from pkg import sub` names
    the submodule; `from pkg import name` the package)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [
                f"{node.module}.{alias.name}"
                if f"{node.module}.{alias.name}" in modules
                else node.module
                for alias in node.names
            ]
        else:
            continue
        found.update(name for name in names if name in modules)
    return found


def import_graph() -> dict[str, set[str]]:
    """Each project module -> the project modules it imports."""
    modules = project_modules()
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph[name] = imported(tree, modules) - {name}
    return graph


def import_circle(graph: dict[str, set[str]]) -> list[str]:
    """One circle of imports in `graph` (its first module repeated at the end), or []."""
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as error:
        return list(error.args[1])
    return []


def layer(module: str) -> int:
    return LAYERS.index(module.split(".")[0])


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a, targets in graph.items() for b in targets if layer(b) > layer(a))


def test_the_graph_reads_every_layer_and_lazy_imports():
    graph = import_graph()
    assert {layer(m) for m in graph} == set(range(len(LAYERS)))
    assert "store.db" in graph["store"] and "store" in graph["agents.team.episode"]
    lazy = ast.parse(
        "def f():\n    from store import schema, open_db\n    import agents.team.episode\n"
    )
    assert imported(lazy, project_modules()) == {"store.schema", "store", "agents.team.episode"}


def test_a_circle_and_an_upward_import_are_found():
    circle = {"store.db": {"store.schema"}, "store.schema": {"store.db"}, "agents.team": set()}
    assert set(import_circle(circle)) == {"store.db", "store.schema"}
    assert import_circle({"agents.team": {"store.db"}, "store.db": set()}) == []
    assert upward_imports({"store.db": {"agents.team"}, "agents.team": set()}) == [
        ("store.db", "agents.team")
    ]


def test_no_import_circle_among_our_modules():
    circle = import_circle(import_graph())
    assert circle == [], "import circle: " + " -> ".join(circle)


def test_imports_only_go_down_the_layers():
    upward = upward_imports(import_graph())
    assert upward == [], (
        f"upward imports (the layers are app -> learner -> agents -> store): {upward}"
    )


MAX_LINES = 600  # a module longer than this does several jobs: split it by idea


def test_no_module_is_over_600_lines():
    long = {
        name: lines
        for name, path in project_modules().items()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"split these by idea: {long}"


def test_only_the_store_reads_and_writes_tables():
    """The store's API for every read and write: no module of app/, agents/ or learner/ reaches
    into a table (`db["..."]`) or runs SQL of its own."""
    by_hand = re.compile(r'db\[["\']|\.execute\(|\.query\(|rows_where\(')
    found = sorted(
        name
        for name, path in project_modules().items()
        if name.split(".")[0] in ("app", "agents", "learner")
        and by_hand.search(path.read_text(encoding="utf-8"))
    )
    assert found == [], f"use the store's functions: {found}"


MAX_FUNCTION_LINES = 80  # a function longer than this does several things: name them


def test_no_function_is_over_80_lines():
    long = {
        f"{name}.{node.name}": node.end_lineno - node.lineno + 1
        for name, path in project_modules().items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    }
    assert not long, f"split these into named steps: {long}"
