"""Integer program over the problem's graph, solved by OR-Tools CP-SAT.

Why CP-SAT and not the bundled MIP solvers (SCIP, CBC through pywraplp): the constraint that must never be
broken is the memory budget, in bytes up to ~1e13. CP-SAT works on integers, so that constraint holds
exactly (bytes divided by their common divisor, nothing rounded); a floating-point MIP checks it to a
feasibility tolerance and can return a plan a few bytes over. CP-SAT also takes a solution hint and a time
limit and runs a parallel portfolio. The price is the objective: seconds become integers in units of
`scale` (the largest plan time maps to `resolution` units), so "optimal" is optimal to within
L + E units (each chosen coefficient is off by at most half a unit, in the answer and in the true
optimum), about (L + E) / resolution of the time, for L decisions and E edges. The plan found is
re-costed in float64 and checked in exact bytes before it is returned.

The model follows the problem's `edges`, not a chain, so it also serves non-chain graphs. A switch cost is
charged through y[e, o, o'], the joint choice of an edge's two ends, whose marginals are the two x rows:
on a chain that LP is tight (unlike y >= x_a + x_b - 1). The hint is the faster fitting plan of the greedy
and the heuristic. Without switch costs, decisions with identical rows are interchangeable and must take
non-decreasing option indices (`interchangeable`): at sub-layer granularity a model's L attention and L
MLP sub-layers are two such groups, whose L! orderings CP-SAT would otherwise explore (2 s without a proof
at L = 48 and 8 options; about 0.2 s with the ordering). At the time limit the best plan found is
returned as 'feasible'.

Example: `paradyse-lab plan --model gpt --seq 256K --solver ilp --recompute --granularity sublayer`.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time

import numpy as np
from ortools.sat.python import cp_model

from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.solvers.base import Solution, infeasible_solution, make_solution
from paradyse_lab.solvers.bounds import CapTable
from paradyse_lab.solvers.greedy import GreedySolver
from paradyse_lab.solvers.heuristic import HeuristicSolver


def interchangeable(problem: SearchProblem) -> list[list[int]]:
    """Groups (of two or more, in index order) of decisions with identical time, kept and transient rows.

    Without switch costs a plan's time and peak do not depend on which of two such decisions takes which
    option, so every plan has a twin with their options sorted: requiring that order removes the
    symmetric copies (L / 2 attention and L / 2 MLP sub-layers of one model form two groups of L / 2,
    whose orderings would otherwise all be searched) and keeps at least one optimal plan.
    """
    rows = np.concatenate([problem.time_s.view(np.int64), problem.kept_bytes, problem.effective_transient], axis=1)
    _, group = np.unique(rows, axis=0, return_inverse=True)
    members = {}
    for l, g in enumerate(group.ravel()):
        members.setdefault(int(g), []).append(l)
    return [m for m in members.values() if len(m) > 1]


def sorted_within(plan: np.ndarray, groups: list[list[int]]) -> np.ndarray:
    """`plan` with its options sorted within each group of interchangeable decisions (same time and peak)."""
    plan = np.array(plan, copy=True)
    for members in groups:
        plan[members] = np.sort(plan[members])
    return plan


def _set_limits(params, time_limit_s: float, workers: int, deterministic: bool) -> None:
    """The solve's stopping rule and threads (`ILPSolver.deterministic`). Deterministic: one worker. CP-SAT's
    parallel portfolio shares solutions and bounds between its threads as they come, and sat_parameters.proto
    calls only `interleave_search` deterministic with several workers (marked experimental); on the solver
    benchmark's problems of 24 and 96 decisions with a limit of 0.5 it took 1.4-5x longer than one worker
    and stopped short of optima one worker proved (OR-Tools 9.15, 2 workers on a busy 2-core machine)."""
    params.num_workers = workers
    if deterministic:
        params.max_deterministic_time = time_limit_s
        params.random_seed = 0
    else:
        params.max_time_in_seconds = time_limit_s


def _solve_keeping_sigint(solver, model):
    """`solver.solve(model)` with Python's SIGINT handler still in place afterwards. CP-SAT catches SIGINT
    during a solve unless `catch_sigint_signal` is off, and puts the default action back when it returns
    (OR-Tools 9.15: a later Ctrl-C killed the process without cleanup); here it never catches it, and the
    handler from before the solve is put back in case it was replaced anyway. A Ctrl-C during the solve
    raises KeyboardInterrupt when the solve returns (within its time limit)."""
    solver.parameters.catch_sigint_signal = False
    before = signal.getsignal(signal.SIGINT)
    try:
        return solver.solve(model)
    finally:
        if before is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, before)


class ILPSolver:
    """CP-SAT with scaled integer time, exact integer bytes, the greedy plan as hint, and a time limit."""

    name = "ilp"

    def __init__(self, time_limit_s: float = 10.0, workers: int | None = None, resolution: float = 1e9,
                 deterministic: bool = False):
        self.time_limit_s = time_limit_s
        self.deterministic = deterministic
        """Stop at `time_limit_s` of CP-SAT's deterministic time (its work count, "as close as possible to a
        second", sat_parameters.proto `max_deterministic_time`) on one search worker with a fixed seed, and
        at no wall-clock limit: the same problem gets the same answer however busy the machine is. Otherwise
        a parallel portfolio stops at `time_limit_s` of wall time, and on a loaded machine it may stop before
        it finds or proves the answer an idle one does."""
        self.workers = 1 if deterministic else workers or min(8, os.cpu_count() or 1)
        self.resolution = resolution

    @staticmethod
    def _max_transient(model: cp_model.CpModel, x: list, trans: np.ndarray, caps: np.ndarray):
        """The max-transient term z >= sum_o transient[l, o] x[l, o] for every decision l.

        Not the incremental form (u[k] = 'the term reaches caps[k]', u[k] => u[k - 1], x[l, o] => u of its
        value, z = caps[0] + sum_k (caps[k] - caps[k - 1]) u[k]), although its LP relaxation is 3-10x
        tighter: with it, CP-SAT 9.15's presolve returned 'optimal' plans 10-20% slower than the optimum
        on small random problems (`random_problem` of tests/solvers/test_solvers_agree.py, seeds 118 and
        203; seed 203 comes out right with presolve off), so it is not used.
        """
        L, O = trans.shape
        z = model.new_int_var(int(caps[0]), int(caps[-1]), "max_transient")
        for l in range(L):  # z >= transient of the chosen option of every decision
            model.add(z >= sum(int(trans[l, o]) * x[l][o] for o in range(O)))
        return z

    def solve(self, problem: SearchProblem) -> Solution:
        started = time.perf_counter()
        table = CapTable.build(problem)
        if table.peak_floor.min() > problem.budget_bytes:
            return infeasible_solution(problem, self.name, started, table)
        # the hint: the faster fitting plan of the greedy and the paper's heuristic
        hints = [s for s in (GreedySolver().solve(problem), HeuristicSolver().solve(problem)) if s.feasible]
        hint = problem.indices(list(min(hints, key=lambda s: s.predicted_time_s).assignment))
        L, O = problem.num_decisions, problem.num_options
        model = cp_model.CpModel()

        # 1. scaling: bytes by their common divisor (exact), seconds to integer units (rounded)
        eff = problem.effective_transient
        unit = math.gcd(*(int(v) for v in np.unique(np.concatenate([problem.kept_bytes.ravel(), eff.ravel()]))))
        unit = unit or 1
        kept = problem.kept_bytes // unit
        trans = eff // unit
        room = (problem.budget_bytes - problem.fixed_bytes) // unit  # sum kept + max transient <= room
        worst = problem.time_s.max(axis=1).sum() + len(problem.edges) * problem.switch_s.max()
        scale = self.resolution / max(worst, 1e-30)
        t_int = np.rint(problem.time_s * scale).astype(np.int64)
        s_int = np.rint(problem.switch_s * scale).astype(np.int64)

        # 2. variables
        # x[l][o]: decision l runs option o
        x = [[model.new_bool_var(f"x_{l}_{o}") for o in range(O)] for l in range(L)]
        caps = np.unique(trans)  # the values the max-transient term can take
        # y[(e, o, o')]: edge e = (a, b) has a running o and b running o' (all pairs, when any switch costs)
        y = {}
        if s_int.any():
            for e in range(len(problem.edges)):
                for o in range(O):
                    for o2 in range(O):
                        y[e, o, o2] = model.new_bool_var(f"y_{e}_{o}_{o2}")

        # 3. constraints
        for l in range(L):  # one option per decision
            model.add_exactly_one(x[l])
        z = self._max_transient(model, x, trans, caps)
        # memory: fixed + sum kept + max transient <= budget (in units of `unit` bytes, exact)
        model.add(sum(int(kept[l, o]) * x[l][o] for l in range(L) for o in range(O)) + z <= room)
        if y:  # y is the joint choice of the edge's ends: its marginals are x[a] and x[b] (a tight LP)
            for e, (a, b) in enumerate(problem.edges):
                for o in range(O):
                    model.add(sum(y[e, o, o2] for o2 in range(O)) == x[a][o])
                    model.add(sum(y[e, o2, o] for o2 in range(O)) == x[b][o])
        else:  # symmetry breaking: interchangeable decisions take non-decreasing option indices
            groups = interchangeable(problem)
            for members in groups:
                for a, b in zip(members, members[1:]):
                    model.add(sum(o * x[a][o] for o in range(O)) <= sum(o * x[b][o] for o in range(O)))
            hint = sorted_within(hint, groups)

        # 4. objective: scaled time plus scaled switch costs
        model.minimize(sum(int(t_int[l, o]) * x[l][o] for l in range(L) for o in range(O))
                       + sum(int(s_int[o, o2]) * var for (_, o, o2), var in y.items() if s_int[o, o2]))

        # 5. solve, from the greedy plan
        for l in range(L):
            for o in range(O):
                model.add_hint(x[l][o], int(hint[l] == o))
        for (e, o, o2), var in y.items():
            a, b = problem.edges[e]
            model.add_hint(var, int(hint[a] == o and hint[b] == o2))
        solver = cp_model.CpSolver()
        _set_limits(solver.parameters, self.time_limit_s, self.workers, self.deterministic)
        # LP relaxation of every constraint, cuts included: at L = 96 with 8 options it proves optimality
        # 10-30% sooner without switch costs and within 1.4-4 s instead of not in 4 s with them
        solver.parameters.linearization_level = 2
        # no presolve: CP-SAT 9.15's presolve called a plan 1.1% slower than the optimum 'optimal' on a
        # 5-decision problem (`random_problem` seed 9665 of tests/solvers/test_solvers_agree.py); without
        # it every problem of `paradyse-lab solvers bench --sizes 24,96 --options 8` is also solved sooner
        solver.parameters.cp_model_presolve = False
        status = _solve_keeping_sigint(solver, model)

        # 6. extract and check
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            plan = [next(o for o in range(O) if solver.boolean_value(x[l][o])) for l in range(L)]
            found = "optimal" if status == cp_model.OPTIMAL else "feasible"
            if found == "feasible" and problem.time_of(hint) < problem.time_of(plan):
                plan = hint
            return make_solution(problem, plan, found, self.name, started)
        if status == cp_model.INFEASIBLE:  # cannot happen after the least-peak check; kept for safety
            return infeasible_solution(problem, self.name, started, table)
        return make_solution(problem, hint, "feasible", self.name, started)  # time limit, nothing better
