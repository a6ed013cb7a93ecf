"""One option on every decision: the paper's static baselines (`static:megatron_ts`, `static:metp`, ...).

Status 'feasible' when the uniform plan fits (it is not claimed optimal), else 'infeasible' with that same
plan, so a caller can see how far over the budget the baseline runs. An option the problem dropped because
its shapes do not split (`SearchProblem.dropped`) cannot make a plan at all: `UserInputError` with the
reason (a simulator checks `problem.dropped` first).

Example: `paradyse-lab plan --model gpt --seq 64K --solver static:megatron_ts`.
"""

from __future__ import annotations

import time

from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.errors import UserInputError
from paradyse_lab.solvers.base import Solution, make_solution


class StaticSolver:
    """`option` on every decision."""

    def __init__(self, option: str):
        if not option:
            raise UserInputError("static solver needs an option name: static:NAME")
        self.option = option
        self.name = f"static:{option}"

    def solve(self, problem: SearchProblem) -> Solution:
        started = time.perf_counter()
        if self.option in problem.dropped:
            raise UserInputError(f"{self.name} cannot run this shape: {problem.dropped[self.option]}")
        if self.option not in problem.options:
            raise UserInputError(
                f"unknown option {self.option!r} for {self.name}; valid: {', '.join(problem.options)}"
            )
        plan = [self.option] * problem.num_decisions
        status = "feasible" if problem.is_feasible(plan) else "infeasible"
        return make_solution(problem, plan, status, self.name, started)
