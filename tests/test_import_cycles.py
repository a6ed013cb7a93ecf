"""No import cycle between the repository's modules: the graph of module-level imports (read with `ast`, nothing
imported) has no strongly connected component of more than one module, and no module imports itself.

Module-level means what runs when the module is imported: statements at the top, inside top-level `if`/`try`
blocks and class bodies; not function bodies (run later) and not `if TYPE_CHECKING:` blocks (never run).
Importing `a.b.c` runs `a/__init__` and `a/b/__init__` too, so those count as imports of the importer.
A second test counts function-local imports too (a package's lazy `__getattr__` excepted, as in the layering test).
Run: `python -m pytest -q tests/test_import_cycles.py`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
from source_trees import parsed
from test_import_layers import imports_of, sources, with_parents


def module_level_imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The repository modules `module` imports when it is imported."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()

    def visit(stmts: list[ast.stmt]) -> None:
        for node in stmts:
            if isinstance(node, ast.Import):
                for a in node.names:
                    out.update(with_parents(a.name, known))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = module.split(".") if is_package else module.split(".")[:-1]
                    anchor = package[:len(package) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                out.update(with_parents(base, known))
                out.update(m for a in node.names if (m := f"{base}.{a.name}") in known)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)
            elif isinstance(node, (ast.With, ast.ClassDef)):
                visit(node.body)

    visit(parsed(path).body)
    # a module's own parent packages are loaded before it by any import of it: not an edge of a cycle
    return {m for m in out if m != module and not module.startswith(m + ".")}


def import_graph() -> nx.DiGraph:
    files = sources()
    known = set(files)
    graph = nx.DiGraph()
    graph.add_nodes_from(known)
    for module, path in files.items():
        graph.add_edges_from((module, imported) for imported in module_level_imports(module, path, known))
    return graph


def cycles(graph: nx.DiGraph) -> list[list[str]]:
    return [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]


def test_no_import_cycle_between_modules():
    found = cycles(import_graph())
    assert not found, "modules that import each other at module level:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_cycle_even_through_function_local_imports():
    """Counting the imports inside functions too (what a module needs to run, if not to load): still no cycle, so
    that moving an import to the top can never make one."""
    files = sources()
    known = set(files)
    graph = nx.DiGraph()
    for module, path in files.items():
        graph.add_edges_from((module, target) for _, imported in imports_of(module, path, known)
                             for target in with_parents(imported, known)
                             if target != module and not module.startswith(target + "."))
    found = cycles(graph)
    assert not found, "modules that import each other:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_check_sees_a_cycle(tmp_path):
    """Two modules importing each other at the top are a cycle; a function-local or TYPE_CHECKING import is not."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from pkg.b import g\n")
    b.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import f\n"
                 "def h():\n    from pkg.a import f\n")
    known = {"pkg.a", "pkg.b"}
    assert module_level_imports("pkg.a", a, known) == {"pkg.b"}
    assert module_level_imports("pkg.b", b, known) == set()
    c = tmp_path / "c.py"  # a new file: the parsed trees are cached by path
    c.write_text("import pkg.a\n")
    graph = nx.DiGraph([(m, i) for m, p in (("pkg.a", a), ("pkg.b", c)) for i in module_level_imports(m, p, known)])
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
