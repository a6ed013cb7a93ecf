"""The strategy catalog is the one home of a strategy's name, label, abbreviation, colour, layout, schedule
and runtime module; no other module keeps its own per-strategy table.

Run: `python -m pytest -q tests/paradyse_lab/test_strategy_home.py`.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest
from source_trees import PACKAGES, nodes, parsed

from paradyse_lab.core.model_spec import PRESETS
from paradyse_lab.core.strategies import CATALOG, TWO_D, USABLE, Strategy, get_strategy, layout_unit
from paradyse_lab.costmodel.strategy_work import SCHEDULES

ROOT = Path(__file__).resolve().parents[2]
DATA_TABLES = {
    ("paradyse_lab/costmodel/strategy_work.py", "SCHEDULES"),  # the schedule functions, by the catalog's key
    ("paradyse_lab/costmodel/paper_measurements.py", "MEASURED_SHAPES"),  # the authors' measured fits, per model
    ("paradyse_lab/costmodel/techniques.py", "TILED_SCHEDULES"),  # the tiled MLP's work, by the catalog's schedule key
}
"""Literals keyed by strategy names that are not properties of a strategy (file, the name they are bound to)."""


def test_every_usable_strategy_has_its_parts_in_the_catalog():
    from matplotlib.colors import is_color_like  # here: no matplotlib import at collection

    entries = [CATALOG[name] for name in USABLE + TWO_D]
    for s in entries:
        assert s.paper_name and s.abbreviation and is_color_like(s.color) and s.layout == "unified"
        assert s.runtime_module == f"paradyse_lab.runtime.strategies.{s.schedule}"
        assert s.name == s.schedule + (f":{s.head_degree}" if s.head_degree else "")
    assert set(SCHEDULES) == {s.schedule for s in entries}
    assert len({s.abbreviation for s in entries}) == len({s.color for s in entries}) == len(entries)
    assert not CATALOG["colossal_z"].schedule and not CATALOG["colossal_z"].runtime_module


def test_a_usable_entry_without_its_parts_is_refused():
    with pytest.raises(ValueError, match="needs color, runtime_module"):
        replace(CATALOG["metp"], color="", runtime_module="")
    Strategy("x", "X", attention="", mlp="", splits_heads=False, ring_attention=False, usable=False)


def test_layout_unit_is_2p_and_1_on_one_rank():
    """One rank holds the whole sequence in natural order: any length runs, under the ring strategies too."""
    assert [layout_unit(p) for p in (1, 2, 8)] == [1, 4, 16]
    gpt = PRESETS["gpt"]
    for name in USABLE:
        assert get_strategy(name).violation(gpt, 1, 4097) is None
    assert "divisible by 16" in get_strategy("metp").violation(gpt, 8, 8 * 3)


def _bound_names(tree: ast.AST) -> dict[int, str]:
    """id(node) -> the name its enclosing assignment binds, for every node under an assignment."""
    out = {}
    for parent in ast.walk(tree):
        if isinstance(parent, (ast.Assign, ast.AnnAssign)):
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            bound = ",".join(ast.unparse(t) for t in targets)
            out.update({id(n): bound for n in ast.walk(parent.value) if id(n) not in out} if parent.value else {})
    return out


def _strategy_tables(path: Path) -> list[str]:
    """Dict, tuple, list or set literals in `path` naming two or more usable strategies (`NAME`, `static:NAME`)."""
    names = set(USABLE) | {f"static:{n}" for n in USABLE}
    found = []
    for node in nodes(path):
        items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
        if not isinstance(node, (ast.Dict, ast.Tuple, ast.List, ast.Set)) or items is None:
            continue
        hits = {k.value for k in items if isinstance(k, ast.Constant) and k.value in names}
        if len(hits) >= 2:
            found.append(node)
    bound = _bound_names(parsed(path)) if found else {}  # the few files with such a literal
    return [f"{path.relative_to(ROOT).as_posix()}:{node.lineno} {bound.get(id(node), '')}" for node in found]


def test_no_module_keeps_its_own_per_strategy_table():
    """Labels, colours, abbreviations, module and schedule tables come from the catalog, not from literals."""
    tables = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            tables += [t for t in _strategy_tables(path)
                       if (rel, t.split(" ", 1)[1].split("[")[0]) not in DATA_TABLES]
    assert not tables, "per-strategy literals outside the catalog (derive them from the strategy catalog):\n" + \
        "\n".join(tables)


def _docstrings(path: Path) -> set[int]:
    """id() of every docstring node (module, class, function) and bare string statement."""
    return {id(n.value) for n in nodes(path) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}


def _layout_unit_copies(path: Path) -> list[str]:
    """`2 * p` or `2 * X.p` (the unified layout's unit, which is 1 on one rank) written out in `path`."""
    def is_p(n):
        return (isinstance(n, ast.Name) and n.id == "p") or (isinstance(n, ast.Attribute) and n.attr == "p")

    rel = path.relative_to(ROOT).as_posix()
    return [f"{rel}:{n.lineno}" for n in nodes(path)
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult)
            and any(isinstance(a, ast.Constant) and a.value == 2 and is_p(b)
                    for a, b in ((n.left, n.right), (n.right, n.left)))]


def test_the_layout_unit_is_computed_only_by_layout_unit():
    """Outside the runtime (whose layout.py cuts the 2p zig-zag chunks themselves), lengths are rounded with
    `layout_unit(p)`, never `2 * p`, which is wrong on one rank."""
    copies = [c for package in PACKAGES if package != "runtime" for path in sorted((ROOT / package).rglob("*.py"))
              for c in _layout_unit_copies(path) if not c.startswith("paradyse_lab/core/strategies.py:")]
    assert not copies, "2 * p outside paradyse_lab.core.strategies.layout_unit (call it instead):\n" + "\n".join(copies)


def test_no_code_string_spells_a_strategy_label():
    """Report and figure text takes labels from `CATALOG[name].paper_name` (docstrings may name them)."""
    import re

    labels = re.compile(r"\b(" + "|".join(CATALOG[n].paper_name for n in USABLE) + r")\b")
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "paradyse_lab" / "core" / "strategies.py":
                continue
            docs = _docstrings(path)
            found += [f"{path.relative_to(ROOT).as_posix()}:{n.lineno}: {n.value[:60]!r}" for n in nodes(path)
                      if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
                      and labels.search(n.value)]
    assert not found, "strategy labels spelled in code strings (use CATALOG[name].paper_name):\n" + "\n".join(found)
