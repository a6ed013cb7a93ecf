"""Docstrings and comments of the packages say what and why without naming another source file's path: such
narration ("as runtime/model/packed.py does") goes stale with every move. The rule: no path of a Python file under
one of the packages, except the file's own (a script's run command, `python figures/groups.py ...`); a class or
function name in backticks names the thing instead. Paths under tests/ (in a run command such as
`python -m pytest tests/...`) and docs/ pages may be named.

Run: `python -m pytest -q tests/test_docstrings.py`.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from source_trees import PACKAGES, parsed

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = sorted({path.parent.relative_to(ROOT / pkg).parts[0] for pkg in PACKAGES
                  for path in (ROOT / pkg).glob("*/**/*.py")})
"""The packages' first-level folders (`costmodel`, `model`, ...): a path may start there too."""
SOURCE_PATH = re.compile(rf"(?<![\w./-])(?:{'|'.join((*PACKAGES, *FOLDERS))})/[\w/]*\.py\b")
"""A path of a package's Python file, from the checkout (`runtime/model/packed.py`) or from a package
(`costmodel/packed.py`); not `tests/...`, not `docs/...`, not another project's (`megatron/core/...`)."""


def prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every docstring (any statement that is a bare string, attribute docstrings included) and
    every comment of `path`."""
    found = [(node.lineno, node.value.value) for node in ast.walk(parsed(path))
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
             and isinstance(node.value.value, str)]
    source = io.StringIO(path.read_text(encoding="utf-8"))
    found += [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(source.readline)
              if tok.type == tokenize.COMMENT]
    return found


def path_mentions(path: Path) -> list[str]:
    """`file:line: path` for each source path other than its own that a docstring or comment of `path` names."""
    name = path.relative_to(ROOT).as_posix()
    if not SOURCE_PATH.search(path.read_text(encoding="utf-8")):
        return []  # no such path anywhere in the file: nothing to tokenize
    return [f"{name}:{line}: {hit}" for line, text in prose(path) for hit in SOURCE_PATH.findall(text)
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


def test_a_script_may_name_its_own_path():
    own = ROOT / "figures" / "groups.py"
    assert "figures/groups.py" in "".join(text for _, text in prose(own))
    assert path_mentions(own) == []


def test_no_docstring_or_comment_names_a_source_file():
    found = [hit for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py")) for hit in path_mentions(path)]
    assert not found, f"{len(found)} docstrings or comments name a source file's path:\n" + "\n".join(found)
