"""Docstrings and comments of the packages say what and why without naming another source file's path or file
name: such narration ("as runtime/model/packed.py does", "as strategy_work.py counts") goes stale with every move.
The rule: no path of a Python file under one of the packages, and no bare file name of one of their modules, except
the file's own (a script's run command, `python figures/groups.py ...`); a class, function or module name in
backticks names the thing instead. Paths under tests/ (in a run command such as `python -m pytest tests/...`) and
docs/ pages may be named.

Run: `python -m pytest -q tests/test_docstrings.py`.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from source_trees import PACKAGES, nodes

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = sorted({path.parent.relative_to(ROOT / pkg).parts[0] for pkg in PACKAGES
                  for path in (ROOT / pkg).glob("*/**/*.py")})
"""The packages' first-level folders (`costmodel`, `model`, ...): a path may start there too."""
SOURCE_PATH = re.compile(rf"(?<![\w./-])(?:{'|'.join((*PACKAGES, *FOLDERS))})/[\w/]*\.py\b")
"""A path of a package's Python file, from the checkout (`runtime/model/packed.py`) or from a package
(`costmodel/packed.py`); not `tests/...`, not `docs/...`, not another project's (`megatron/core/...`)."""
MODULE_FILES = frozenset(path.name for pkg in PACKAGES for path in (ROOT / pkg).rglob("*.py")
                         if path.name != "__init__.py")
"""The file names of the packages' modules: a bare `strategy_work.py` in prose narrates a file as a path does."""
FILE_NAME = re.compile(r"(?<![\w./-])\w+\.py\b")


def prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every docstring (any statement that is a bare string, attribute docstrings included) and
    every comment of `path`."""
    found = [(node.lineno, node.value.value) for node in nodes(path)
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
             and isinstance(node.value.value, str)]
    source = io.StringIO(path.read_text(encoding="utf-8"))
    found += [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(source.readline)
              if tok.type == tokenize.COMMENT]
    return found


def path_mentions(path: Path) -> list[str]:
    """`file:line: path` for each source path other than its own that a docstring or comment of `path` names."""
    name = path.relative_to(ROOT).as_posix()
    text = path.read_text(encoding="utf-8")
    if not SOURCE_PATH.search(text) and not any(hit in MODULE_FILES for hit in FILE_NAME.findall(text)):
        return []  # no such path or file name anywhere in the file: nothing to tokenize
    hits = [(line, hit) for line, text in prose(path)
            for hit in (*SOURCE_PATH.findall(text), *(h for h in FILE_NAME.findall(text) if h in MODULE_FILES))]
    return [f"{name}:{line}: {hit}" for line, hit in hits
            if not f"/{name}".endswith(f"/{hit}")]


def test_rule_finds_a_source_path_and_spares_tests_and_docs(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('"""Reads runtime/model/packed.py; run `python -m pytest tests/runtime/test_x.py`."""\n'
                      "x = 'runtime/comm/record.py'  # simulator/engine.py, costmodel/packed.py, not megatron/a.py\n"
                      '"""Attribute docstring: paradyse_lab/core/plan.py."""\n', encoding="utf-8")
    texts = [text for _, text in prose(sample)]
    hits = [hit for text in texts for hit in SOURCE_PATH.findall(text)]
    assert hits == ["runtime/model/packed.py", "paradyse_lab/core/plan.py", "simulator/engine.py",
                    "costmodel/packed.py"]


def test_rule_finds_a_bare_module_file_name(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('"""Kept (strategy_work.py): x; conftest.py and no_such_module.py are not modules."""\n',
                      encoding="utf-8")
    assert [hit for _, text in prose(sample) for hit in FILE_NAME.findall(text) if hit in MODULE_FILES] == [
        "strategy_work.py"]


def test_a_script_may_name_its_own_path():
    own = ROOT / "figures" / "groups.py"
    assert "figures/groups.py" in "".join(text for _, text in prose(own))
    assert path_mentions(own) == []


def test_no_docstring_or_comment_names_a_source_file():
    found = [hit for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py")) for hit in path_mentions(path)]
    assert not found, f"{len(found)} docstrings or comments name a source file's path:\n" + "\n".join(found)
