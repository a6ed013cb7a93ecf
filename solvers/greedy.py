"""Greedy plan: the ILP's hint, and a cheap baseline beyond the paper.

Start from the fastest option of each decision; while the plan does not fit, make the single-decision
change that frees the most peak bytes per second it costs; then, while some single change makes the plan
faster and still fits, make the best one. When the first phase gets stuck, start the second from the
least-memory plan. Every move is costed exactly (peak with the max-transient term, switches on edges).

Example: `paradyse-lab plan --model gpt --seq 256K --solver greedy --recompute`.
"""

from __future__ import annotations

import time

import numpy as np

from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.solvers.base import Solution, infeasible_solution, make_solution, min_peak_plan


def _moves(problem: SearchProblem, plan: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[L, O] peak after setting decision l to option o, and the change of time it makes."""
    L = plan.size
    rows = np.arange(L)
    eff = problem.effective_transient
    cur_r = eff[rows, plan]
    top = int(np.argmax(cur_r))
    others = np.delete(cur_r, top)
    second = others.max() if others.size else problem.fixed_transient_bytes
    max_without = np.full(L, cur_r[top])
    max_without[top] = max(second, problem.fixed_transient_bytes)
    cur_k = problem.kept_bytes[rows, plan]
    peak = (problem.fixed_bytes + cur_k.sum() - cur_k[:, None] + problem.kept_bytes
            + np.maximum(max_without[:, None], eff))
    delta = problem.time_s - problem.time_s[rows, plan][:, None]
    if problem.edges and problem.switch_s.any():
        ea, eb = problem.edge_ends
        sw = problem.switch_s
        now = sw[plan[ea], plan[eb]][:, None]
        np.add.at(delta, ea, sw[:, plan[eb]].T - now)  # decision a of the edge changes
        np.add.at(delta, eb, sw[plan[ea], :] - now)  # decision b changes
    return peak, delta


def improve(problem: SearchProblem, plan: np.ndarray, max_moves: int) -> np.ndarray:
    """From a fitting plan: while a single-decision change makes it faster and it still fits, make the best."""
    plan = np.array(plan, dtype=np.int64)
    tiny = 1e-12 * max(1.0, problem.time_of(plan))
    for _ in range(max_moves):
        new_peak, delta = _moves(problem, plan)
        delta = np.where(new_peak <= problem.budget_bytes, delta, np.inf)
        l, o = np.unravel_index(int(np.argmin(delta)), delta.shape)
        if not delta[l, o] < -tiny:
            break
        plan[l] = o
    return plan


class GreedySolver:
    """Repair to fit, then improve by single-decision moves."""

    name = "greedy"

    def __init__(self, max_moves: int | None = None):
        self.max_moves = max_moves

    def solve(self, problem: SearchProblem) -> Solution:
        started = time.perf_counter()
        L, O = problem.num_decisions, problem.num_options
        limit = self.max_moves or 4 * L * O
        plan = np.argmin(problem.time_s, axis=1)
        peak = problem.peak_bytes(plan)
        for _ in range(limit):  # phase 1: repair
            if peak <= problem.budget_bytes:
                break
            new_peak, delta = _moves(problem, plan)
            freed = peak - new_peak
            if not (freed > 0).any():
                break
            score = np.where(freed > 0, np.maximum(delta, 1e-12) / np.maximum(freed, 1), np.inf)
            l, o = np.unravel_index(int(np.argmin(score)), score.shape)
            plan[l], peak = o, int(new_peak[l, o])
        if peak > problem.budget_bytes:
            plan, peak = min_peak_plan(problem)
            if peak > problem.budget_bytes:
                return infeasible_solution(problem, self.name, started)
        plan = improve(problem, plan, limit)
        return make_solution(problem, plan, "feasible", self.name, started)
