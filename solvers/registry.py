"""Solvers by name: `get_solver("dp")`, `get_solver("static:metp")`; unknown names list the valid ones."""

from __future__ import annotations

import importlib

from paradyse_lab.errors import UserInputError
from paradyse_lab.solvers.base import Solver
from paradyse_lab.solvers.static import StaticSolver

SOLVERS = {
    "heuristic": ("paradyse_lab.solvers.heuristic", "HeuristicSolver"),
    "dp": ("paradyse_lab.solvers.dp", "DPSolver"),
    "ilp": ("paradyse_lab.solvers.ilp", "ILPSolver"),
    "brute_force": ("paradyse_lab.solvers.brute_force", "BruteForceSolver"),
    "greedy": ("paradyse_lab.solvers.greedy", "GreedySolver"),
}
"""name -> (module, class); modules import lazily (the ILP pulls in OR-Tools)."""
STATIC_PREFIX = "static:"
SOLVER_NAMES = tuple(SOLVERS) + (STATIC_PREFIX + "NAME",)


def check_solver_name(name: str) -> None:
    """Raise `UserInputError` unless `name` is a registered solver (without importing it)."""
    if name not in SOLVERS:
        raise UserInputError(f"unknown solver {name!r}; valid: {', '.join(SOLVER_NAMES)}")


def get_solver(name: str, **options) -> Solver:
    """A solver instance; `options` go to its constructor (e.g. time_limit_s for ilp)."""
    if name.startswith(STATIC_PREFIX):
        return StaticSolver(name[len(STATIC_PREFIX):], **options)
    check_solver_name(name)
    module, cls = SOLVERS[name]
    return getattr(importlib.import_module(module), cls)(**options)
