"""What every solver shares: `Solution`, the `Solver` protocol, the final plan check, the least-peak plan.

A solver's `solve(problem)` returns a `Solution` whose plan it has checked against the problem with exact
integer bytes (`make_solution`). Infeasible is a status, not an exception: the plan then is the one with
the least peak memory (`min_peak_plan`; the heuristic returns the paper's fallback instead), so a caller can
still charge it and see by how much it misses the budget.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Protocol

import numpy as np

from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.solvers.bounds import CapTable

STATUSES = ("optimal", "feasible", "infeasible")
BIG = np.int64(2**62 // 512)
"""Sentinel kept bytes for 'no option allowed' (sums of up to 512 of them stay in int64)."""


class SolverError(RuntimeError):
    """A solver produced a plan that breaks the problem: a bug, never a user mistake."""


@dataclass(frozen=True)
class Solution:
    """A solver's answer (the JSON printed by `paradyse-lab plan` and `solve`)."""

    solver: str
    """Registry name of the solver (`dp`, `static:metp`)."""
    status: str
    """'optimal' (proven), 'feasible' (fits, not proven best) or 'infeasible' (nothing fits / none found)."""
    assignment: tuple[str, ...]
    """The option name chosen for each decision (what a policy turns into a `Plan`); when infeasible, the
    least-memory assignment the solver knows."""
    predicted_time_s: float
    """Time of the plan under the problem's costs, switches included."""
    peak_bytes: int
    """Exact peak memory of the plan."""
    solve_time_s: float
    """Wall time of `solve`."""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def feasible(self) -> bool:
        """Whether the plan fits the budget."""
        return self.status != "infeasible"

    def to_dict(self) -> dict:
        """JSON-ready, in the documented key order (the assignment under its JSON key `plan`)."""
        return {("plan" if k == "assignment" else k): (list(v) if k == "assignment" else v)
                for k, v in asdict(self).items()}


class Solver(Protocol):
    """`solve(problem) -> Solution`; hyperparameters only in the constructor."""

    name: str

    def solve(self, problem: SearchProblem) -> Solution:
        """Best plan the solver finds for `problem`."""


def make_solution(problem: SearchProblem, plan, status: str, solver: str, started: float) -> Solution:
    """Cost `plan` exactly and check it: a plan claimed feasible must fit, or `SolverError`."""
    idx = problem.indices(list(plan))
    peak = problem.peak_bytes(idx)
    if status != "infeasible" and peak > problem.budget_bytes:
        raise SolverError(f"{solver} returned a plan of {peak} B over the budget of {problem.budget_bytes} B")
    return Solution(solver=solver, status=status, assignment=tuple(problem.names(idx)),
                    predicted_time_s=problem.time_of(idx), peak_bytes=peak,
                    solve_time_s=time.perf_counter() - started)


def min_peak_plan(problem: SearchProblem, table: CapTable | None = None) -> tuple[np.ndarray, int]:
    """The plan of least peak memory (ties: least time per decision) and that peak, exactly."""
    table = table or CapTable.build(problem)
    c = int(np.argmin(table.peak_floor))
    allowed = problem.effective_transient <= table.caps[c]
    kept = np.where(allowed, problem.kept_bytes, np.iinfo(np.int64).max)
    lean = allowed & (kept == kept.min(axis=1, keepdims=True))
    plan = np.argmin(np.where(lean, problem.time_s, np.inf), axis=1)
    return plan, int(table.peak_floor[c])


def infeasible_solution(problem: SearchProblem, solver: str, started: float,
                        table: CapTable | None = None) -> Solution:
    """Status 'infeasible' with the least-memory plan."""
    plan, _ = min_peak_plan(problem, table)
    return make_solution(problem, plan, "infeasible", solver, started)
