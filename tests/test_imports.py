"""The package's import graph has no cycle, between modules nor between the package's top-level modules and
sub-packages (``lnrepro.store``, ``lnrepro.analysis``, ...): each sits on a floor above everything it imports and
nothing imports back up. An ast walk of src/lnrepro counts every import, at module level, inside functions and
under ``TYPE_CHECKING`` alike, so a back edge cannot hide."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "lnrepro"


def module_names(root: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (a package as its ``__init__``)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported(node: ast.AST, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """The package's modules one import statement names: ``from a import b`` names a.b when that is a module,
    else a."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in modules}
    if not isinstance(node, ast.ImportFrom):
        return set()
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - node.level + 1]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    out = {f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules}
    if len(out) < len(node.names) and target in modules:
        out.add(target)
    return out


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its file."""
    files = module_names(root)
    names = set(files)
    graph = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"
        graph[name] = {t for node in ast.walk(tree) for t in _imported(node, name, is_package, names)} - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): each holds at least one cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def collapsed(graph: dict[str, set[str]], within: str = "lnrepro") -> dict[str, set[str]]:
    """``graph`` between the units one level below ``within`` (``lnrepro.store``, ``lnrepro.analysis``: a
    sub-package stands for all its modules); imports inside a unit and modules outside ``within`` left out."""
    depth = within.count(".") + 2

    def unit(name: str) -> str | None:
        return ".".join(name.split(".")[:depth]) if name.startswith(within + ".") else None

    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        source = unit(module)
        if source is not None:
            out.setdefault(source, set()).update(t for t in map(unit, targets) if t is not None and t != source)
    return out


def test_the_graph_sees_every_kind_of_import(tmp_path):
    """Function-level, TYPE_CHECKING and relative imports are edges; a two-module circle is found."""
    pkg = tmp_path / "lnrepro"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .b import x\n")
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import y\n")
    (pkg / "a.py").write_text("def f():\n    from lnrepro.sub import b\n")
    graph = import_graph(pkg)
    assert graph == {"lnrepro": set(), "lnrepro.a": {"lnrepro.sub.b"}, "lnrepro.sub": {"lnrepro.sub.b"},
                     "lnrepro.sub.b": {"lnrepro.a"}}
    assert cycles(graph) == [["lnrepro.a", "lnrepro.sub.b"]]


def test_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles (strongly connected groups of modules): " + "; ".join(map(" <-> ".join, found))


def test_the_packages_import_one_way():
    """Between lnrepro's top-level modules and sub-packages no cycle: the store sits below the analysis that reads
    it, the host below the bench that times with it."""
    units = collapsed(import_graph())
    assert {"lnrepro.store", "lnrepro.analysis", "lnrepro.host", "lnrepro.bench"} <= set(units)
    found = cycles(units)
    assert not found, "imports back up between packages: " + "; ".join(map(" <-> ".join, found))


def test_the_analysis_imports_one_way():
    """Inside lnrepro.analysis the records (results, fates) lie below the aggregate (aggregate, tables, pair), the
    aggregate below the statistics (stats/), the statistics below the sections (sections/, study), the sections
    below the orchestration (build) and the rendering (render/); the formatting helpers (numbers) and the
    intervals' t quantile (intervals) lie below them all. No cycle between these units, and none of them imports
    one of a higher floor."""
    units = collapsed(import_graph(), "lnrepro.analysis")
    found = cycles(units)
    assert not found, "imports back up inside the analysis: " + "; ".join(map(" <-> ".join, found))
    floors = [("results", "fates", "numbers", "intervals"), ("aggregate", "tables", "pair"), ("stats",),
              ("sections", "study"), ("build", "gradinit", "store_fates"), ("render",)]
    floor = {f"lnrepro.analysis.{name}": i for i, names in enumerate(floors) for name in names}
    assert set(units) <= set(floor), sorted(set(units) - set(floor))
    upward = sorted((a, b) for a, targets in units.items() for b in targets if floor[b] > floor[a])
    assert not upward, f"imports of a higher floor: {upward}"


def test_a_package_importing_back_up_is_found():
    """The check itself: one low module importing the analysis closes a cycle between the packages, though no
    cycle of modules."""
    graph = import_graph()
    graph["lnrepro.io"] = graph["lnrepro.io"] | {"lnrepro.analysis.numbers"}
    assert ["lnrepro.analysis", "lnrepro.io"] in [sorted(c) for c in cycles(collapsed(graph))] or any(
        {"lnrepro.analysis", "lnrepro.io"} <= set(c) for c in cycles(collapsed(graph)))
    assert collapsed({"lnrepro.analysis.stats.budget": {"lnrepro.analysis.sections.answer"}},
                     "lnrepro.analysis") == {"lnrepro.analysis.stats": {"lnrepro.analysis.sections"}}


def test_the_papers_facts_are_a_leaf():
    """lnrepro.paper imports nothing of the package: the configuration layer and the analysis both read it."""
    assert import_graph()["lnrepro.paper"] == set()


def test_the_configuration_layer_imports_no_stage():
    """config/ sits below the stages that read it: it imports none of them, not even inside a function (its
    ``ModelSettings.model_config`` builds the model's own config class, which imports no configuration)."""
    graph = import_graph()
    stages = ("lnrepro.analysis", "lnrepro.train", "lnrepro.evaluate", "lnrepro.bench", "lnrepro.data",
              "lnrepro.cli")
    upward = {(m, t) for m, targets in graph.items() if m.split(".")[:2] == ["lnrepro", "config"]
              for t in targets if t.startswith(stages)}
    assert not upward, upward
