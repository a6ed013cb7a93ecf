"""The exact chain DP written plainly: the readable reference for `paradyse_lab.solvers.dp`, and the tests' oracle.

The problem is `DPSolver`'s (`SearchProblem`): decisions l = 0..L-1 in a chain, option o
at decision l takes time[l, o] seconds and keeps kept[l, o] bytes to the end of the step; its effective
transient e[l, o] = max(transient_bytes[l, o], fixed_transient_bytes) is alive only while it runs;
consecutive decisions that pick o' then o pay switch[o', o]. A plan pi is feasible when its peak

    fixed_bytes + sum_l kept[l, pi_l] + max_l e[l, pi_l] <= budget_bytes,

and the optimum is the feasible plan of least fixed_time_s + sum_l time[l, pi_l] + sum_l switch[pi_l-1, pi_l].

A partial plan of decisions 0..l is a label (t, k, m): its time (switches included), its kept bytes and its
largest effective transient. F_l(o) holds the labels of the partial plans that end in option o:

    F_0(o) = {(time[0, o], kept[0, o], e[0, o])}
    F_l(o) = Pareto {(t + switch[o', o] + time[l, o], k + kept[l, o], max(m, e[l, o]))
                     for every o' and (t, k, m) in F_l-1(o'), kept when fixed + k' + m' <= budget}

Pareto keeps the labels that no other label of the set matches or beats in all of t, k and m: whatever
follows a dominated label also follows the one dominating it, at no more time and no higher peak (the peak
only grows with k and m), and a label over budget stays over. The optimum is fixed_time_s + the least t
in F_L-1; when every F_L-1(o) is empty no plan fits.

The fronts can grow with the number of distinct kept sums: this is for tests up to about 20 decisions.
`paradyse_lab.solvers.dp` solves the same recurrence fast (the max term enumerated as caps, bounds, compiled passes).
Example, from Python: `ReferenceDPSolver().solve(SearchProblem.from_json("problem.json"))`.
"""

from __future__ import annotations

import bisect
import time

import numpy as np

from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.errors import UserInputError
from paradyse_lab.solvers.base import Solution, infeasible_solution, make_solution


def pareto(labels: list[tuple]) -> list[tuple]:
    """The labels (t, k, m, plan) that no other one matches or beats in t, k and m. In ascending order
    every label that may dominate one comes before it, so a label is kept when no label kept before it has
    k' <= k and m' <= m. Those earlier labels are held as their (k, m) staircase: ks ascending with ms
    strictly descending, so that the least m' among the kept labels of k' <= k is the m' of the last step at or
    left of k (one bisection instead of a scan of the front)."""
    front, ks, ms = [], [], []
    for label in sorted(labels):
        _, k, m, _ = label
        i = bisect.bisect_right(ks, k)
        if i and ms[i - 1] <= m:
            continue  # matched or beaten by an earlier label
        front.append(label)
        lo = hi = bisect.bisect_left(ks, k)
        while hi < len(ks) and ms[hi] >= m:  # steps this label now matches or beats in k and m
            hi += 1
        ks[lo:hi], ms[lo:hi] = [k], [m]
    return front


def reference_plan(problem: SearchProblem) -> np.ndarray | None:
    """[L] option indices of an optimal plan by the recurrence of the module docstring, or None when no
    plan fits."""
    if not problem.is_chain:
        raise UserInputError("solver reference_dp needs switch edges along the chain of decisions; use ilp")
    times, kept = problem.time_s.tolist(), problem.kept_bytes.tolist()
    eff, switch = problem.effective_transient.tolist(), problem.switch_s.tolist()
    room = problem.budget_bytes - problem.fixed_bytes
    fronts = [[(times[0][o], kept[0][o], eff[0][o], (o,))] if kept[0][o] + eff[0][o] <= room else []
              for o in range(problem.num_options)]
    for l in range(1, problem.num_decisions):
        fronts = [pareto([(t + switch[plan[-1]][o] + times[l][o], k + kept[l][o], max(m, eff[l][o]), plan + (o,))
                          for front in fronts for t, k, m, plan in front
                          if k + kept[l][o] + max(m, eff[l][o]) <= room])
                  for o in range(problem.num_options)]
    finals = [label for front in fronts for label in front]
    return np.array(min(finals)[3], dtype=np.int64) if finals else None


class ReferenceDPSolver:
    """`reference_plan` as a solver: 'optimal', or 'infeasible' with the least-peak plan (as `DPSolver`)."""

    name = "reference_dp"

    def solve(self, problem: SearchProblem) -> Solution:
        started = time.perf_counter()
        plan = reference_plan(problem)
        if plan is None:
            return infeasible_solution(problem, self.name, started)
        return make_solution(problem, plan, "optimal", self.name, started)
