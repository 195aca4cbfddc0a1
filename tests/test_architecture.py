"""The package's import graph has no loops, and its imports point one way: every import inside
``llmco2`` (at module level, inside a function, or under ``if TYPE_CHECKING:``) goes to the same
stage or an earlier one of
specs -> analytic -> graph -> data -> measure -> physics -> prediction -> carbon -> serving ->
training -> api -> ui -> cli
(serving builds on carbon's accounting; training needs torch and nothing before it does; the use
cases live in ``llmco2.api``, the calculator page in ``llmco2.ui``, and only ``llmco2.cli`` parses
flags). No module outside ``cli`` imports it, and no module imports another's private
(``_``-prefixed) names.

Run as a script to print the graph's loops and the imports against the stage order:
``python tests/test_architecture.py``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "llmco2"

#: Import loops still known to exist, each as the set of modules it joins (none).
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()

#: Pairs that once imported each other and must now import one way only.
UNTIED = (("llmco2.measure.meter", "llmco2.measure.windows"), ("llmco2.cli.predict", "llmco2.cli.serving"),
          ("llmco2.analytic.layer", "llmco2.analytic.table"))


#: The stages, earliest first: a module may import its own stage and earlier ones.
STAGES = ("specs", "analytic", "graph", "data", "measure", "physics", "prediction", "carbon", "serving", "training",
          "api", "ui", "cli")
#: Modules outside the stage packages, shared by every stage (before the first). The package
#: itself (its lazy re-exports of the API) sits with the API.
SHARED = ("llmco2.version", "llmco2.errors", "llmco2.file_checks", "llmco2.config_checks", "llmco2.resumable_output",
          "llmco2.hydra_app", "llmco2.interrupts")


def stage(module: str) -> int:
    """Position of ``module``'s stage in :data:`STAGES` (-1: shared by all)."""
    if module in SHARED:
        return -1
    if module == PACKAGE:
        return STAGES.index("api")
    return STAGES.index(module.split(".")[1])


def against_stages(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports from a module to one of a later stage, as (importer, imported)."""
    return sorted((a, b) for a, deps in graph.items() for b in deps if stage(b) > stage(a))


def package_modules(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> source file of every module of ``package`` (packages as their ``__init__``)."""
    out: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, type_checking: bool = True) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree``, at any depth (functions, methods, ``try``), and those
    under ``if TYPE_CHECKING:`` unless ``type_checking`` is false."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        children = list(ast.iter_child_nodes(node))
        if not type_checking and isinstance(node, ast.If) and _is_type_checking(node):
            children = list(node.orelse)
        stack.extend(children)


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (``from a import b`` counts as importing
    the submodule ``a.b`` when there is one, else ``a``)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        deps: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in modules)
                continue
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:
                    deps.add(sub)
                elif target in modules:
                    deps.add(target)
        deps.discard(name)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The import loops: strongly connected components of more than one module (Tarjan's
    algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[frozenset[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_cycle_finder_sees_function_level_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from pkg import a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n")
    graph = import_graph(package_modules(tmp_path, "pkg"))
    assert graph["pkg.b"] == {"pkg.a"} and graph["pkg.c"] == {"pkg.a"}
    assert cycles(graph) == [frozenset({"pkg.a", "pkg.b"})]


def test_no_import_cycles_beyond_the_known_ones() -> None:
    found = cycles(import_graph(package_modules()))
    new = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert not new, f"import loops among llmco2 modules: {new}"


def test_untied_pairs_import_one_way() -> None:
    graph = import_graph(package_modules())
    loops = cycles(graph)
    for a, b in UNTIED:
        assert a in graph and b in graph
        assert not any(a in c and b in c for c in loops), f"{a} and {b} import each other (directly or through others)"


def test_stage_check_sees_an_import_of_a_later_stage() -> None:
    graph = {"llmco2.physics.a": {"llmco2.prediction.b", "llmco2.errors"}, "llmco2.prediction.b": {"llmco2.physics.a"},
             "llmco2.api": {"llmco2.cli.c"}, "llmco2.cli.c": {"llmco2.api"}}
    assert against_stages(graph) == [("llmco2.api", "llmco2.cli.c"), ("llmco2.physics.a", "llmco2.prediction.b")]


def test_every_module_has_a_stage() -> None:
    for name in package_modules():
        assert name in SHARED or name == PACKAGE or (len(name.split(".")) > 1 and name.split(".")[1] in STAGES), name


def test_imports_follow_the_stage_order() -> None:
    wrong = against_stages(import_graph(package_modules()))
    assert not wrong, f"imports from an earlier stage to a later one: {wrong}"


def private_imports(modules: dict[str, Path]) -> list[tuple[str, str]]:
    """``(importer, "module._name")`` for every import of a ``_``-prefixed name from another module
    of the package (``from llmco2.x import _y``)."""
    found = []
    for name, path in modules.items():
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith(PACKAGE):
                found += [(name, f"{node.module}.{a.name}") for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__") and node.module != name]
    return sorted(found)


def test_private_import_check_sees_one(tmp_path: Path) -> None:
    pkg = tmp_path / "llmco2"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from llmco2.b import _hidden, shown\n")
    (pkg / "b.py").write_text("_hidden = shown = 1\n")
    assert private_imports(package_modules(tmp_path, "llmco2")) == [("llmco2.a", "llmco2.b._hidden")]


def test_no_module_imports_private_names_of_another() -> None:
    wrong = private_imports(package_modules())
    assert not wrong, f"private names imported across modules: {wrong}"


def test_only_cli_imports_cli() -> None:
    graph = import_graph(package_modules())
    wrong = sorted((a, b) for a, deps in graph.items() for b in deps
                   if b.startswith(f"{PACKAGE}.cli") and not a.startswith(f"{PACKAGE}.cli"))
    assert not wrong, f"modules outside llmco2.cli import it: {wrong}"


def test_experiments_import_the_package_not_each_other() -> None:
    for path in sorted((ROOT / "experiments").glob("*.py")):
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            assert not any(n == "experiments" or n.startswith("experiments.") for n in names), (
                f"{path.name} imports another experiment; move what they share into llmco2/")


if __name__ == "__main__":
    graph = import_graph(package_modules())
    for loop in cycles(graph):
        print(("known: " if loop in KNOWN_CYCLES else "") + " <-> ".join(sorted(loop)))
    for a, b in against_stages(graph):
        print(f"against the stage order: {a} -> {b}")
    for a, b in private_imports(package_modules()):
        print(f"private name: {a} imports {b}")
