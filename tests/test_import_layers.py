"""One direction of imports, read from the sources with `ast` (nothing is imported).

Layers, bottom to top:

- the vocabulary: `paradyse_lab` without `paradyse_lab.cli` and `paradyse_lab.app` (specs, catalog, layer
  graph, search problem, cost models, profiles, workloads);
- `solvers` (on the vocabulary), `simulator` (on the vocabulary and the solvers);
- `runtime` (torch; on the vocabulary only) and `figures` (on the vocabulary only);
- the application: `paradyse_lab.cli` and `paradyse_lab.app` (and `python -m paradyse_lab`, which runs the
  CLI), the only code that imports `solvers`, `simulator`, `runtime` or `figures` from outside them.

A package's module-level `__getattr__` (PEP 562 lazy names: `paradyse_lab`'s public API, served from
paradyse_lab.app.api) imports on the caller's behalf when a name is looked up, so its imports are not the
package's (`lazy_export_nodes`).

`solvers` and `simulator` never import torch, directly or through any module of this repository they import.
Every import counts, function-local ones included, and so do `importlib.import_module("X")` and `__import__("X")`
with a constant name; `test_solvers_and_simulator_load_alone` imports every module of `solvers` and `simulator`
in a fresh interpreter to catch what reading cannot (computed names).
Run: `python -m pytest -q tests/test_import_layers.py`.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from source_trees import PACKAGES, nodes, parsed

ROOT = Path(__file__).resolve().parents[1]
APPLICATION = ("paradyse_lab.cli", "paradyse_lab.app", "paradyse_lab.__main__")
TORCH = "torch"
SUBPACKAGES = ("runtime", "solvers", "simulator", "figures")
"""The layers that are folders at the checkout's root, imported as `paradyse_lab.<folder>`."""


def layer(module: str) -> str:
    """The layer a module of this repository belongs to."""
    if any(module == a or module.startswith(a + ".") for a in APPLICATION):
        return "application"
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in SUBPACKAGES else "vocabulary"


FORBIDDEN = {
    "vocabulary": {"solvers", "simulator", "runtime", "figures", "application"},
    "solvers": {"simulator", "runtime", "figures", "application", TORCH},
    "simulator": {"runtime", "figures", "application", TORCH},
    "runtime": {"solvers", "simulator", "figures", "application"},
    "figures": {"solvers", "simulator", "runtime", "application"},
    "application": set(),
}
"""Layer -> the layers (and torch) its modules must not import."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    parts = ["paradyse_lab", *parts] if parts[0] in SUBPACKAGES else parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources() -> dict[str, Path]:
    """Module name -> file, for every .py file of the packages (tests/ excluded)."""
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def imports_of(module: str, path: Path, known: set[str]) -> list[tuple[int, str]]:
    """(line, imported module) for every import statement of the file; `from X import Y` names X.Y when
    that is a module of this repository, else X."""
    is_package = path.name == "__init__.py"
    tree = parsed(path)
    lazy = lazy_export_nodes(tree) if is_package else set()
    out = []
    for node in nodes(path):
        if node in lazy:
            continue
        dynamic = dynamic_import(node)
        if dynamic is not None:
            out.append((node.lineno, dynamic))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                package = module.split(".") if is_package else module.split(".")[:-1]
                anchor = package[:len(package) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((node.lineno, sub if sub in known else base))
    return list(dict.fromkeys(out))


def lazy_export_nodes(tree: ast.Module) -> set[ast.AST]:
    """The nodes inside a package's module-level `__getattr__` (PEP 562): what it imports is loaded when a
    caller looks the name up (`paradyse_lab.plan_step` serves paradyse_lab.app.api), never by importing the
    package, so it is the caller's import, not the package's. `test_solvers_and_simulator_load_alone` checks
    the package loads nothing more by being imported."""
    return {inner for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
            for inner in ast.walk(node)}


def dynamic_import(node: ast.AST) -> str | None:
    """The module of `importlib.import_module("X")`, `import_module("X")` or `__import__("X")` called with a
    constant absolute name (a computed name cannot be read here: `test_solvers_and_simulator_load_alone`
    catches those by importing)."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in ("import_module", "__import__"):
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str) and not first.value.startswith("."):
        return first.value
    return None


def target_layer(imported: str, known: set[str]) -> str | None:
    """The layer of an imported module (its own layer for this repository's modules, `torch` for torch,
    None for anything else)."""
    top = imported.split(".")[0]
    if top == TORCH:
        return TORCH
    if top == "paradyse_lab":
        return layer(imported)
    return None


def with_parents(imported: str, known: set[str]) -> list[str]:
    """Importing a.b.c runs a/__init__, a/b/__init__ and a/b/c: the repository modules among them."""
    parts = imported.split(".")
    return [m for m in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if m in known]


def torch_chains(files: dict[str, Path], graph: dict[str, list[tuple[int, str]]]) -> dict[str, list[str]]:
    """Module -> one chain of imports from it to torch (absent when none exists)."""
    known = set(files)
    chains: dict[str, list[str]] = {}
    changed = True
    while changed:  # fixed point over the import graph
        changed = False
        for module, edges in graph.items():
            if module in chains:
                continue
            for _, imported in edges:
                if imported.split(".")[0] == TORCH:
                    chains[module] = [module, TORCH]
                    changed = True
                    break
                via = next((m for m in with_parents(imported, known) if m in chains and m != module), None)
                if via is not None:
                    chains[module] = [module] + chains[via]
                    changed = True
                    break
    return chains


def violations(files: dict[str, Path] | None = None, graph: dict | None = None) -> list[str]:
    """`file:line: rule` for every import that breaks the layering (default: this repository's sources)."""
    files = sources() if files is None else files
    known = set(files)
    graph = {m: imports_of(m, p, known) for m, p in files.items()} if graph is None else graph
    chains = torch_chains(files, graph)
    found = []
    for module, edges in sorted(graph.items()):
        own = layer(module)
        where = files[module].relative_to(ROOT)
        for line, imported in edges:
            target = target_layer(imported, known)
            if target is not None and target != own and target in FORBIDDEN[own]:
                found.append(f"{where}:{line}: {own} must not import {target} (imports {imported})")
            elif TORCH in FORBIDDEN[own] and target not in (None, TORCH):
                via = next((m for m in with_parents(imported, known) if m in chains), None)
                if via is not None:
                    found.append(f"{where}:{line}: {own} must not import torch, even indirectly "
                                 f"(imports {imported}: {' -> '.join(chains[via])})")
    return found


def test_imports_go_one_way():
    found = violations()
    assert not found, "imports against the layering (tests/test_import_layers.py docstring):\n" + "\n".join(found)


def test_the_checker_sees_every_kind_of_import():
    """The reader resolves plain, from-, relative and function-local imports (so a passing run means
    something)."""
    files = sources()
    known = set(files)
    edges = {m: {i for _, i in imports_of(m, files[m], known)}
             for m in ("paradyse_lab.simulator.engine", "paradyse_lab.app.report", "paradyse_lab.cli.train_command")}
    assert "paradyse_lab.core.search_problem" in edges["paradyse_lab.simulator.engine"]
    assert "paradyse_lab.app.report.document" in edges["paradyse_lab.app.report"]
    assert "paradyse_lab.runtime.launch.ranks" in edges["paradyse_lab.cli.train_command"]  # imported inside functions
    assert "paradyse_lab.app.train_options" in edges["paradyse_lab.cli.train_command"]
    assert layer("paradyse_lab.costmodel.lowering") == "vocabulary" and layer("paradyse_lab.app.reproduce") == (
        "application")


def test_the_checker_sees_dynamic_imports(tmp_path):
    """`importlib.import_module` and `__import__` with a constant name count as imports; computed and
    relative names are left to `test_solvers_and_simulator_load_alone`."""
    src = tmp_path / "dyn.py"
    src.write_text("import importlib\nfrom importlib import import_module\n"
                   "def f(name):\n"
                   "    importlib.import_module('torch.nn')\n"
                   "    import_module('paradyse_lab.runtime.training.loop')\n"
                   "    __import__('paradyse_lab.figures')\n"
                   "    importlib.import_module(name)\n"
                   "    importlib.import_module('.x', 'solvers')\n")
    assert imports_of("paradyse_lab.solvers.dyn", src, set()) == [(1, "importlib"), (2, "importlib"), (4, "torch.nn"),
                                                    (5, "paradyse_lab.runtime.training.loop"),
                                                                 (6, "paradyse_lab.figures")]


LOAD_ALONE = """
import importlib, pkgutil, sys
metadata_before = "importlib.metadata" in sys.modules
import paradyse_lab
assert metadata_before or "importlib.metadata" not in sys.modules, "import paradyse_lab read its version"
assert paradyse_lab.__version__
import paradyse_lab.solvers.ilp
import paradyse_lab.solvers.heuristic
import paradyse_lab.solvers.greedy
print(" ".join(m for m in ("numba", "paradyse_lab.solvers.kernels", "paradyse_lab.solvers.bound_kernels")
               if m in sys.modules))
for package in ("paradyse_lab.solvers", "paradyse_lab.simulator"):
    for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
        importlib.import_module(info.name)
print(" ".join(sorted(m for m in sys.modules for f in ("torch", "runtime", "figures", "paradyse_lab.runtime",
                                                       "paradyse_lab.figures", "paradyse_lab.app", "paradyse_lab.cli")
                                                       if m == f or m.startswith(f + "."))))
"""


def test_a_lazy_package_getattr_is_not_an_import_of_the_package(tmp_path):
    """Imports inside a package `__init__`'s module-level `__getattr__` are skipped; anywhere else they count."""
    src = tmp_path / "__init__.py"
    src.write_text("import importlib\n"
                   "def __getattr__(name):\n"
                   "    return importlib.import_module('paradyse_lab.runtime.training.loop')\n"
                   "def other():\n"
                   "    import paradyse_lab.figures\n")
    assert imports_of("paradyse_lab", src, set()) == [(1, "importlib"), (5, "paradyse_lab.figures")]
    module = tmp_path / "mod.py"
    module.write_text(src.read_text())
    assert (3, "paradyse_lab.runtime.training.loop") in imports_of("paradyse_lab.mod", module, set())


def test_solvers_and_simulator_load_alone():
    """Importing every module of `solvers` and `simulator` (one fresh interpreter) loads neither torch nor
    the runtime, the figures or the application, whatever way the modules import; the solvers that use no
    compiled kernel (ilp, heuristic, greedy), imported first, load neither numba nor the kernels
    (solvers/kernels.py, solvers/bound_kernels.py: ~1 CPU s for every `simulate --policy dynamic:ilp`)."""
    done = subprocess.run([sys.executable, "-c", LOAD_ALONE], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    by_solvers_without_kernels, by_every_module = done.stdout.split("\n")[:2]
    assert by_solvers_without_kernels == "", f"loaded by importing the ilp: {by_solvers_without_kernels}"
    assert by_every_module.split() == [], f"loaded by importing solvers and simulator: {by_every_module}"


def test_torch_is_caught_through_the_vocabulary():
    """A solver that imports a vocabulary module which imports torch breaks the rule (line and chain shown)."""
    files = {m: ROOT / (m.replace(".", "/") + ".py")
             for m in ("paradyse_lab.solvers.fast", "paradyse_lab.helper", "paradyse_lab.runtime.comm.collectives")}
    files["paradyse_lab.solvers.fast"] = ROOT / "solvers" / "fast.py"
    graph = {"paradyse_lab.solvers.fast": [(3, "paradyse_lab.helper")], "paradyse_lab.helper": [(7, "torch.nn")],
             "paradyse_lab.runtime.comm.collectives": [(1, "torch")]}
    assert violations(files, graph) == [
        "solvers/fast.py:3: solvers must not import torch, even indirectly "
        "(imports paradyse_lab.helper: paradyse_lab.helper -> torch)"]


def test_layout_table_matches_the_tree():
    """Every package and subpackage has a row in docs/layout.md's table, and every row's folder exists."""
    text = (ROOT / "docs" / "layout.md").read_text()
    rows = {line.split("`")[1] for line in text.splitlines() if line.startswith("| `")}
    packages = {f"{p.parent.relative_to(ROOT)}/" for pkg in PACKAGES for p in (ROOT / pkg).rglob("*/__init__.py")}
    packages |= {f"{pkg}/" for pkg in PACKAGES}
    assert packages <= rows, sorted(packages - rows)
    assert all((ROOT / row).is_dir() for row in rows), sorted(r for r in rows if not (ROOT / r).is_dir())


def _annotation_of(path: Path, cls: str, field: str) -> str | None:
    """The annotation of `field` in the class `cls` of `path`, as written."""
    for node in nodes(path):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.target.id == field:
                    return ast.unparse(item.annotation)
    return None


def test_the_plan_crosses_from_solver_to_runtime_as_one_type():
    """The policy's decision carries a `paradyse_lab.core.plan.Plan` (options and granularity), never names: the
    field is typed, a decision built with names is refused, and the training loop refuses one that is not a
    Plan and hands it to the model as it is (no `list(decision.plan)` that would turn it back into names)."""
    from paradyse_lab.core.plan import Plan
    from paradyse_lab.simulator.policies import StepDecision

    assert _annotation_of(ROOT / "simulator" / "policies.py", "StepDecision", "plan") == "Plan"
    with pytest.raises(TypeError, match="Plan"):
        StepDecision(("megatron_ts", "metp"), 0.0, True, 0.0)
    assert StepDecision(Plan.from_names(("megatron_ts", "metp"), "sublayer"), 0.0, True, 0.0).plan.granularity == (
        "sublayer")
    loop = {name: parsed(ROOT / "runtime" / "training" / name) for name in ("loop.py", "step.py", "plan_handoff.py")}
    converted = [f"{name}:{n.lineno}" for name, tree in loop.items() for n in ast.walk(tree)
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("list", "tuple")
                 and n.args and ast.unparse(n.args[0]).endswith("decision.plan")]
    assert not converted, f"the training loop turns the plan back into a sequence at {converted}"
    checks = [n for n in ast.walk(loop["plan_handoff.py"])
              if isinstance(n, ast.FunctionDef) and n.name == "decide_plan_on_rank0"]
    assert checks and "isinstance" in ast.unparse(checks[0]) and "Plan" in ast.unparse(checks[0])


def test_no_two_classes_share_a_name():
    """A class name means one thing across the packages: `Plan` is the runtime's plan (paradyse_lab/core/plan.py);
    the API's report of a planned step is `StepAnswer` and the GPU session's list of measurements
    `MeasurementPlan` (three classes were named `Plan`)."""
    where: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in nodes(path):
                if isinstance(node, ast.ClassDef):
                    where.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert {name: files for name, files in where.items() if len(files) > 1} == {}


LIBRARY = "runtime"
LIBRARY_MODULE = "paradyse_lab.runtime"
COMMAND_LINE_MODULES = ("argparse", "paradyse_lab.options")
"""What a command line is built with: argparse, and the options dataclasses turned into flags."""


def command_line_parts(module: str, tree: ast.Module) -> list[str]:
    """`line: what` for every piece of a command line or a measurement application in a module of the runtime
    library: an import of argparse or paradyse_lab.options, `sys.argv`, a top-level `main`, `register` or
    `add_arguments`, a command's options class (`...Options`), and a `__main__` block that does more than refuse
    (print and `raise SystemExit(2)`, so `python -m runtime.X` does not exit 0 having done nothing)."""
    found = []
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        found += [f"{node.lineno}: imports {n}" for n in names
                  if any(n == c or n.startswith(c + ".") for c in COMMAND_LINE_MODULES)]
        if isinstance(node, ast.Attribute) and node.attr == "argv" and ast.unparse(node.value) == "sys":
            found.append(f"{node.lineno}: reads sys.argv")
        if isinstance(node, ast.ClassDef) and node.name.endswith("Options"):
            found.append(f"{node.lineno}: defines the options class {node.name}")
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in ("main", "register", "add_arguments"):
            found.append(f"{node.lineno}: defines {node.name}()")
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and not _only_refuses(node.body):
            found.append(f"{node.lineno}: runs as a command (`python -m {module}`)")
    return found


def _only_refuses(body: list[ast.stmt]) -> bool:
    """A `__main__` block of imports and prints that ends in `raise SystemExit(N)` with N > 0."""
    *head, last = body
    exc = last.exc if isinstance(last, ast.Raise) else None
    ends = (isinstance(exc, ast.Call) and ast.unparse(exc.func) == "SystemExit" and len(exc.args) == 1
            and isinstance(exc.args[0], ast.Constant) and exc.args[0].value)
    prints = all(isinstance(s, (ast.Import, ast.ImportFrom))
                 or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and ast.unparse(s.value.func) == "print")
                 for s in head)
    return bool(ends and prints)


def help_read_from_the_library(files: dict[str, Path]) -> list[str]:
    """`module:line` where a module reads a runtime module's docstring (`runtime.X.__doc__`: a command's help
    written in the library)."""
    return [f"{module}:{node.lineno}" for module, path in files.items()
            for node in nodes(path) if isinstance(node, ast.Attribute)
            and node.attr == "__doc__" and ast.unparse(node.value).startswith(LIBRARY_MODULE + ".")]


def test_the_runtime_is_a_library_without_applications_or_command_line():
    """runtime/ is the torch library only: the measurement applications (profiler, calibrate, the GPU
    session, kernel benchmarks) live in paradyse_lab/app/measure/ and the command lines and their options in
    paradyse_lab/cli/ and paradyse_lab/app/; no module of the runtime builds a command line, and no command
    reads its help from a runtime module."""
    files = sources()
    found = [f"{files[m].relative_to(ROOT)}:{what}" for m in sorted(files) if layer(m) == LIBRARY
             for what in command_line_parts(m, parsed(files[m]))]
    assert not found, "command-line plumbing in the runtime library:\n" + "\n".join(found)
    assert not help_read_from_the_library(files), "help text read from the runtime library"


def test_the_library_check_sees_a_command_line(tmp_path):
    """Each piece of a command line is caught, and a `__main__` block that only refuses is not."""
    source = ("import argparse\nimport sys\nfrom paradyse_lab.options import add_dataclass_arguments\n"
              "class RunOptions:\n    pass\n"
              "def main():\n    return sys.argv\n"
              "if __name__ == '__main__':\n    main()\n")
    assert [f.split(":")[0] for f in command_line_parts("runtime.x", ast.parse(source))] == [
        "1", "3", "4", "7", "6", "8"]
    refuses = "if __name__ == '__main__':\n    import sys\n    print('no', file=sys.stderr)\n    raise SystemExit(2)\n"
    assert command_line_parts("runtime.x", ast.parse(refuses)) == []
    help_file = tmp_path / "cmd.py"
    help_file.write_text("import paradyse_lab.runtime.training.loop\n"
                         "HELP = paradyse_lab.runtime.training.loop.__doc__\nOWN = __doc__\n")
    assert help_read_from_the_library({"cmd": help_file}) == ["cmd:2"]
