"""The layout's dependencies point one way (docs/architecture.md): no package of src/phantora imports, directly
or through others, a package that imports it back. Imports inside functions count too: they are how a cycle
hides."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "phantora"


def package_of(module: str) -> str | None:
    """`phantora.runtime.session` -> `runtime`; a module at the top (`phantora.__init__`) -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else None


def import_graph() -> dict[str, set[str]]:
    """Package -> the other packages its modules import."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        source = package_of(".".join(("phantora", *path.relative_to(PACKAGE).with_suffix("").parts)))
        if source is None:
            continue
        targets = graph.setdefault(source, set())
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                     else [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                target = package_of(name) if name.startswith("phantora.") else None
                if target is not None and target != source:
                    targets.add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each package that can reach itself, with the path back (one per package)."""
    found = []
    for start in sorted(graph):
        paths = [[start, nxt] for nxt in sorted(graph[start])]
        seen: set[str] = set()
        while paths:
            path = paths.pop()
            if path[-1] == start:
                found.append(path)
                break
            if path[-1] in seen:
                continue
            seen.add(path[-1])
            paths.extend(path + [nxt] for nxt in sorted(graph.get(path[-1], ())))
    return found


def test_the_packages_import_each_other_one_way():
    graph = import_graph()
    assert {"runtime", "engine", "models", "cli", "reports"} <= set(graph)
    assert cycles(graph) == [], "\n".join(" -> ".join(c) for c in cycles(graph))


def test_a_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"], ["b", "c", "a", "b"],
                                                                       ["c", "a", "b", "c"]]
