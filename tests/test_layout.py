"""The package's shape: imports run one way (no cycle, not even through lazy imports), production
code does not import the test harness, and modules stay small enough to read (issue 21's layout,
checked like the DAG files are)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "include" / "binlake"
#: Lines a module may have: past it, a module holds more than one concept.
LIMIT = 450


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(path: Path) -> set[str]:
    """The binlake modules ``path`` imports anywhere — inside functions too — except under
    ``if TYPE_CHECKING:`` (for the type checker only, never run)."""
    nodes = _runtime_nodes(ast.parse(path.read_text()))
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {n for n in names if n == "binlake" or n.startswith("binlake.")}


def _runtime_nodes(node: ast.AST) -> list[ast.AST]:
    found: list[ast.AST] = [node]
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and ast.unparse(child.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            found += [n for other in child.orelse for n in _runtime_nodes(other)]
            continue
        found += _runtime_nodes(child)
    return found


def test_production_code_does_not_import_the_test_harness() -> None:
    offenders = {
        name: sorted(i for i in _imports(path) if i.startswith("binlake.testing"))
        for name, path in _modules().items()
        if not name.startswith("binlake.testing")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_imports_form_no_cycle_not_even_through_imports_inside_functions() -> None:
    modules = _modules()
    graph = {name: {i for i in _imports(path) if i in modules} for name, path in modules.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep) :], dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_stay_small(path: Path) -> None:
    """At most ``LIMIT`` lines."""
    assert len(path.read_text().splitlines()) <= LIMIT


#: The data flow's order (docs/architecture.md, "Layout"): the parts every step uses, then the steps
#: in the order data goes through them, then the adapters that run them. An import may go to its own
#: rank or an earlier one, never to a later step.
RANKS = {
    **dict.fromkeys(
        ["binlake", "config", "errors", "events"],
        0,
    ),
    **dict.fromkeys(["offsets", "logs", "faults", "job_metrics"], 0),
    # the parts every step uses, each only on those before it: types and schemas, the source,
    # the state store (plans name source chunks), the Iceberg sink (fenced by the state store)
    "schema": 1,
    "source": 2,
    "state": 3,
    "sink": 4,
    "planner": 5,
    "snapshot": 6,
    "stream": 7,
    "quality": 8,
    **dict.fromkeys(["backfill", "verify"], 9),
    **dict.fromkeys(["status", "spark", "airflow", "cli", "testing"], 10),
}


def _area(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def test_no_step_imports_a_later_step() -> None:
    modules = _modules()
    areas = {_area(name) for name in modules}
    assert areas <= set(RANKS), f"new folders or root modules need a rank: {sorted(areas - set(RANKS))}"
    upward = sorted(
        f"{name} imports {target}"
        for name, path in modules.items()
        for target in _imports(path)
        if target in modules and RANKS[_area(target)] > RANKS[_area(name)]
    )
    assert upward == []


#: Modules a folder may hold before it wants rooms (sub-folders by concept).
ROOM_LIMIT = 20


def test_folders_have_rooms_before_they_grow_past_twenty_modules() -> None:
    crowded = {
        str(folder.relative_to(PACKAGE)): count
        for folder in [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__")]
        if (count := len([m for m in folder.glob("*.py") if m.name != "__init__.py"])) > ROOM_LIMIT
    }
    assert crowded == {}
