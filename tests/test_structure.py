"""The package's shape: no import cycle, no long function, a small public surface."""

from __future__ import annotations

import ast
import pathlib
from typing import Dict, Set

import sume_urllib3

PACKAGE = pathlib.Path(sume_urllib3.__file__).parent


def _modules() -> Dict[str, pathlib.Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: pathlib.Path, known: Dict[str, pathlib.Path]) -> Set[str]:
    """Every package module ``name`` imports, at module level, in functions or for type checking."""
    base = name.split(".") + (["__init__"] if path.name == "__init__.py" else [])
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            target = ".".join(base[: len(base) - node.level] + ([node.module] if node.module else []))
            if not node.level:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                found.add(full if full in known else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {module for module in found if module in known and module != name}


def test_no_module_imports_itself_back() -> None:
    """No import cycle between the package's modules, a package and its own submodules included."""
    known = _modules()
    graph = {name: _imports(name, path, known) for name, path in known.items()}
    cycles = []
    for start in graph:
        pending, reached = list(graph[start]), set()
        while pending:
            node = pending.pop()
            if node not in reached:
                reached.add(node)
                pending.extend(graph[node])
        if start in reached:
            cycles.append(start)
    assert not cycles


def _length(node: ast.AST) -> int:
    """A function's lines, its docstring left out."""
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    start, body = node.lineno, node.body
    has_doc = isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant)
    if has_doc and len(body) > 1:
        start = body[1].lineno - 1
    return (node.end_lineno or node.lineno) - start


def test_no_function_is_longer_than_eighty_lines() -> None:
    """Every function fits on a screen: at most 80 lines, its docstring left out."""
    long = [
        f"{name}.{node.name}: {_length(node)}"
        for name, path in _modules().items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _length(node) > 80
    ]
    assert not long


def test_the_top_level_names_are_the_everyday_ones() -> None:
    """At most 20 names at the top; the rest live in namespaces (exceptions, pacing, observe)."""
    assert len(sume_urllib3.__all__) <= 20
