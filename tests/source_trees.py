"""The syntax trees of the repository's Python files, parsed once per test process: several tests (import
layers, function lengths, the strategy catalog's home, the planner's callers) walk every file of the packages.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGES = ("paradyse_lab", "simulator", "solvers", "runtime", "figures")
"""The repository's packages (the user's top-level layout, less tests/)."""


@functools.cache
def parsed(path: Path) -> ast.Module:
    """The tree of `path` (shared between tests: read it, never change it)."""
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


@functools.cache
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of `parsed(path)`, in `ast.walk`'s order, walked once per test process: a walk costs more
    than the parse it follows, and several tests look at every node of every file."""
    return tuple(ast.walk(parsed(path)))
