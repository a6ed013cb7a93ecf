"""Exhaustive search: every one of O^L plans costed at once with numpy. The tests' oracle.

Refuses (`UserInputError`) problems with more than `max_plans` plans. Ties: the first plan in
lexicographic order of option indices.

Example: `paradyse-lab solvers solve --problem tiny.json --solver brute_force`.
"""

from __future__ import annotations

import time

import numpy as np

from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.errors import UserInputError
from paradyse_lab.solvers.base import Solution, infeasible_solution, make_solution


class BruteForceSolver:
    """Cost all plans, keep the fastest that fits."""

    name = "brute_force"

    def __init__(self, max_plans: int = 2_000_000):
        self.max_plans = max_plans

    def solve(self, problem: SearchProblem) -> Solution:
        started = time.perf_counter()
        L, O = problem.num_decisions, problem.num_options
        if O**L > self.max_plans:
            raise UserInputError(
                f"brute_force refuses {O}^{L} = {O**L} plans (limit {self.max_plans}); use dp or ilp"
            )
        plans = np.indices((O,) * L, dtype=np.int8).reshape(L, -1).T  # [O^L, L], lexicographic
        rows = np.arange(L)
        times = problem.fixed_time_s + problem.time_s[rows, plans].sum(axis=1)
        for a, b in problem.edges:
            times += problem.switch_s[plans[:, a], plans[:, b]]
        peaks = (problem.fixed_bytes + problem.kept_bytes[rows, plans].sum(axis=1)
                 + np.maximum(problem.transient_bytes[rows, plans].max(axis=1), problem.fixed_transient_bytes))
        fits = peaks <= problem.budget_bytes
        if not fits.any():
            return infeasible_solution(problem, self.name, started)
        best = int(np.argmin(np.where(fits, times, np.inf)))
        return make_solution(problem, plans[best], "optimal", self.name, started)
