"""The package's import structure, read from the real source files with ast: imports point one way
(no cycles, lower layers import no higher ones) and no module reads another module's private name."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import spade_gym

SRC = Path(spade_gym.__file__).resolve().parent.parent

#: Lower layers and the modules outside their own package they may import.
LOWER_LAYERS = {
    "spade_gym.policies": {"spade_gym.errors", "spade_gym.files"},
    "spade_gym.sandbox": {"spade_gym.errors"},
}


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted((SRC / "spade_gym").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return out


MODULES = _modules()


def _resolve(name: str) -> str:
    """The deepest module of the package that ``name`` (a module or a name in one) lies in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _imports(tree: ast.Module) -> Iterator[str]:
    """The package's modules ``tree`` imports, at the top or inside functions (TYPE_CHECKING too)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("spade_gym"):
            for alias in node.names:
                yield _resolve(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            yield from (_resolve(a.name) for a in node.names if a.name.startswith("spade_gym"))


GRAPH = {name: {m for m in _imports(tree) if m and m != name} for name, tree in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read_from_the_real_package() -> None:
    assert "spade_gym.trainer.selfplay" in GRAPH
    assert "spade_gym.trainer.warmstart" in GRAPH["spade_gym.trainer.selfplay"]
    assert "spade_gym.errors" in GRAPH["spade_gym.sandbox.worker"]


def test_cycles_are_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [frozenset({"a", "b", "c"})]


def test_no_import_cycle() -> None:
    cycles = [sorted(c) for c in _cycles(GRAPH)]
    assert cycles == [], f"import cycles (top-level or inside functions): {cycles}"


@pytest.mark.parametrize("layer", sorted(LOWER_LAYERS))
def test_lower_layers_import_no_higher_module(layer: str) -> None:
    allowed = LOWER_LAYERS[layer]
    upward = {
        f"{name} -> {target}"
        for name, targets in GRAPH.items()
        if name == layer or name.startswith(layer + ".")
        for target in targets
        if not (target == layer or target.startswith(layer + ".")) and target not in allowed
    }
    assert upward == set()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_private_names(tree: ast.Module) -> set[str]:
    """The private names a module defines: functions, classes, assigned names and attributes."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return {n for n in names if _private(n)}


DEFINED = {name: _defined_private_names(tree) for name, tree in MODULES.items()}


def test_no_module_reads_another_modules_private_name() -> None:
    """``from spade_gym.x import _name`` and ``obj._name`` (``obj`` not ``self``, ``cls`` or
    ``super()``) naming a private name this module does not define but another module does."""
    elsewhere = {n: sorted(m for m in DEFINED if n in DEFINED[m]) for n in set().union(*DEFINED.values())}
    found = []
    for name, tree in MODULES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("spade_gym"):
                found += [f"{name}:{node.lineno}: imports {a.name}" for a in node.names if _private(a.name)]
            elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in DEFINED[name]:
                owner = node.value
                if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                    continue
                if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
                    continue
                if node.attr in elsewhere:
                    found.append(f"{name}:{node.lineno}: {ast.unparse(node)} (defined in {elsewhere[node.attr]})")
    assert found == []


#: Size limits a reader can hold: lines of a module, lines of a function (its signature and docstring too).
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 900, 100


def test_no_module_or_function_is_over_its_size_limit() -> None:
    package = SRC / "spade_gym"
    over = [
        f"{path.relative_to(package)}: {n} lines"
        for path in sorted(package.rglob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    for name, tree in MODULES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > MAX_FUNCTION_LINES:
                    over.append(f"{name}.{node.name}: {lines} lines")
    assert over == []
