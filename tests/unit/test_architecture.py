"""The layout's dependencies point one way (docs/architecture.md). Imports inside functions count too: they are
how a cycle or an arrow back up hides.

- No package of src/phantora imports, directly or through others, a package that imports it back.
- Each package imports only the packages `ALLOWED` names: `models` and `protocol` nothing of ours, `transport`
  only `protocol`, the launcher's `engine` and `reports` never the rank's `runtime`, and nothing imports `cli`.
- A rank process (everything `runtime` imports, at any depth) loads no launcher code: not the coordinator, the
  network simulator (its typed configuration aside), the coordinator server, the CLI or the reports.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "phantora"

ALLOWED: dict[str, set[str]] = {
    "units": set(),
    "models": set(),
    "protocol": set(),
    "transport": {"protocol"},
    "config": {"models"},
    "specs": {"models"},
    "engine": {"models", "protocol", "units"},
    "profiler": {"models", "specs"},
    "runtime": {"models", "protocol", "transport", "config", "specs", "profiler", "units"},
    "reports": {"models", "protocol", "engine", "specs", "config", "units"},
    "cli": {"models", "protocol", "transport", "config", "specs", "profiler", "units", "engine", "reports",
            "runtime"},
}
"""Package -> the packages of ours it may import (docs/architecture.md, Dependency direction)."""

RANK_FORBIDDEN = ("phantora.engine", "phantora.models.network.simulator", "phantora.models.network.flows",
                  "phantora.models.network.nccl", "phantora.models.network.topology", "phantora.transport.server",
                  "phantora.cli", "phantora.reports")
"""Modules (and everything under them) a rank process must never load: they belong to the launcher. The
network package's typed configuration (`models.network.config`, NCCL tuning in a GPU's profile) is data the
rank may hold; the package's `__init__` loads its other modules only when one of their names is asked for."""


def module_name(path: Path) -> str:
    """src/phantora/runtime/session.py -> phantora.runtime.session; .../models/__init__.py -> phantora.models."""
    parts = ("phantora", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def is_package(module: str, known: dict[str, Path]) -> bool:
    return known.get(module, Path()).name == "__init__.py"


def imported_modules(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ours that `module` imports anywhere in its source (function bodies included), with the
    packages whose `__init__` each import runs."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                anchor = module.split(".")
                anchor = anchor if is_package(module, known) else anchor[:-1]
                base = ".".join(anchor[:len(anchor) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known)
    with_parents = {".".join(name.split(".")[:i]) for name in found for i in range(2, name.count(".") + 2)}
    return {name for name in with_parents if name in known and name != module}


def module_graph() -> dict[str, set[str]]:
    known = modules()
    return {module: imported_modules(module, path, known) for module, path in known.items()}


def package_of(module: str) -> str | None:
    """`phantora.runtime.session` -> `runtime`; `phantora.units` -> `units`; `phantora` itself -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def import_graph() -> dict[str, set[str]]:
    """Package -> the other packages its modules import."""
    graph: dict[str, set[str]] = {}
    for module, targets in module_graph().items():
        source = package_of(module)
        if source is None:
            continue
        edges = graph.setdefault(source, set())
        edges.update(p for p in map(package_of, targets) if p is not None and p != source)
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


def arrows_against_the_direction(graph: dict[str, set[str]], allowed: dict[str, set[str]]) -> list[str]:
    """Every `package -> package` import that `allowed` does not list (a package it does not know is one too)."""
    return [f"{source} -> {target}" for source in sorted(graph) for target in sorted(graph[source])
            if target not in allowed.get(source, set())]


def reachable(graph: dict[str, set[str]], roots: list[str]) -> dict[str, str]:
    """Every module reachable from `roots`, with the module that first imports it on the way."""
    importer = {root: "" for root in roots}
    stack = list(roots)
    while stack:
        module = stack.pop()
        for target in sorted(graph.get(module, ())):
            if target not in importer:
                importer[target] = module
                stack.append(target)
    return importer


def chain(importer: dict[str, str], module: str) -> str:
    links = [module]
    while importer[links[-1]]:
        links.append(importer[links[-1]])
    return " <- ".join(links)


def launcher_code_in_the_rank(graph: dict[str, set[str]]) -> list[str]:
    """The forbidden modules a rank process loads, each with the import chain that brings it in."""
    importer = reachable(graph, sorted(m for m in graph if m == "phantora.runtime" or m.startswith("phantora.runtime.")))
    return [chain(importer, module) for module in sorted(importer)
            if any(module == bad or module.startswith(bad + ".") for bad in RANK_FORBIDDEN)]


def test_every_package_has_a_place_in_the_direction():
    assert set(import_graph()) - set(ALLOWED) == set(), "add the new package to ALLOWED and docs/architecture.md"


def test_the_packages_import_each_other_one_way():
    graph = import_graph()
    assert {"runtime", "engine", "models", "cli", "reports"} <= set(graph)
    assert cycles(graph) == [], "\n".join(" -> ".join(c) for c in cycles(graph))


def test_imports_follow_the_documented_direction():
    wrong = arrows_against_the_direction(import_graph(), ALLOWED)
    assert wrong == [], "imports against docs/architecture.md's direction:\n" + "\n".join(wrong)


def test_a_rank_process_loads_no_launcher_code():
    loaded = launcher_code_in_the_rank(module_graph())
    assert loaded == [], "launcher code a rank process imports (module <- its importer):\n" + "\n".join(loaded)


def test_a_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"], ["b", "c", "a", "b"],
                                                                       ["c", "a", "b", "c"]]


def test_an_arrow_against_the_direction_is_found():
    graph = {"models": {"engine"}, "engine": {"models"}, "new": {"models"}}
    assert arrows_against_the_direction(graph, {"engine": {"models"}, "models": set()}) == [
        "models -> engine", "new -> models"]


def test_launcher_code_reached_through_another_module_is_found():
    graph = {"phantora.runtime.session": {"phantora.profiler.x"}, "phantora.profiler.x": {"phantora.engine.coordinator"},
             "phantora.runtime.clock": set()}
    assert launcher_code_in_the_rank(graph) == [
        "phantora.engine.coordinator <- phantora.profiler.x <- phantora.runtime.session"]


def test_imports_inside_functions_and_relative_imports_count(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("def f():\n    from phantora.engine import coordinator\n    from . import sibling\n")
    known = {"phantora.runtime.mod": source, "phantora.runtime.sibling": source,
             "phantora.engine": tmp_path / "__init__.py", "phantora.engine.coordinator": source,
             "phantora.runtime": tmp_path / "__init__.py"}
    assert imported_modules("phantora.runtime.mod", source, known) == {
        "phantora.engine", "phantora.engine.coordinator", "phantora.runtime", "phantora.runtime.sibling"}


def test_test_files_have_unique_basenames():
    """pytest imports test modules by basename (rootdir-relative packages are not used here): two test files of one
    name in different tiers stop the whole suite's collection."""
    from collections import Counter

    tests = Path(__file__).resolve().parents[1]
    names = Counter(p.name for p in tests.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
