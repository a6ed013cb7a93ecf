"""Exact dynamic programming over decisions x options x memory (Pareto fronts), for chain problems.

The plain form of this search, the recurrence and nothing else, is `paradyse_lab.solvers.reference_dp` (read it first);
this one finds the same optimum fast. In the order `DPSolver.solve` runs them: `bound_caps`, `search_caps`
(`search_group` per group of caps: reduced-cost fixing, then `paradyse_lab.solvers.dp_pass`: `reduce_constants`,
`forward_pass` = `pass_tables` + the compiled `kernels.pareto_pass`, `Reduced.expand`).

The peak is fixed + sum of kept + max of transient: the max term is not additive, so the DP enumerates
the cap c on it, over the distinct values of max(transient, fixed transient) (`bounds.CapTable`). Under cap c only
options with effective transient <= c are allowed and the kept bytes may sum to at most
budget - fixed - c. Every plan is feasible under the cap equal to its own max term, so the best over all
caps is the optimum.

For one cap, a forward pass over the decisions keeps, per last option (the state needs it only when some
switch cost is non-zero), the Pareto front of (time, kept bytes) of partial plans: no point is kept that
another beats or equals in both. With switch costs a state is also dropped when one ending in another
option is faster by more than the most the next switch can differ (`kernels.keep_across_options`). The pass is
compiled (`paradyse_lab.solvers.kernels.pareto_pass`), and a cut-down run of it (`BEAM` states per step) goes first
to find a near-optimal plan whose time tightens every bound of the exact run. Before each pass,
Lagrangian reduced-cost fixing removes the options no plan faster than the best one can use, and the
decisions left with one option leave the pass as constants (`dp_pass.reduce_constants`). Memory is exact int64 bytes,
never discretised, so no plan over budget is accepted and none that fits is lost; time is float64. A
partial plan is pruned when the least kept bytes of the remaining decisions would break the kept budget,
or when a lower bound on its completion (least remaining times, or the switch-aware Lagrangian bound of
`paradyse_lab.solvers.bounds`) reaches the best time found.

The best time starts at the LP-rounded plans (`bounds.rounded_plan`) of two reference caps, improved by
the Lagrangian plans and single-decision moves (`greedy.improve`). Caps are visited by ascending
Lagrangian lower bound and skipped once that bound reaches the best time: they cannot hold a faster plan.
Up to `BUCKETS` caps still in play share one forward pass: a partial plan is checked against the budget
of the least of them at or above its max transient, and fronts are kept per such bucket, which is the
same search as one pass per cap (a state may also be dropped for one of a lower bucket: that bucket's
budget is larger and its completions land in buckets no higher).

Optimal means no plan is faster by more than `RTOL` (1e-12) of the time. The answer is re-costed and
checked exactly by `make_solution`. Status is 'optimal', or 'infeasible' when even the least-peak plan
(`min_peak_plan`) does not fit. Measured: `paradyse-lab solvers bench` (results/solver_bench.csv).

Example: `paradyse-lab plan --model gpt --seq 256K --solver dp --recompute --granularity sublayer`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.errors import UserInputError
from paradyse_lab.solvers.base import Solution, infeasible_solution, make_solution
from paradyse_lab.solvers.bounds import CapTable, cost_to_come, cost_to_go, dual_bound, rounded_plan, switch_bounds
from paradyse_lab.solvers.dp_pass import forward_pass, reduce_constants
from paradyse_lab.solvers.greedy import improve
from paradyse_lab.solvers.kernels import warm_up

CHUNK = 48
"""Caps whose switch-aware bounds are computed together."""
BUCKETS = 4
"""Caps searched together in one forward pass."""
BEAM = 48
"""States per front of the heuristic pass that precedes each exact one (its plan tightens the bound)."""
RTOL = 1e-12
"""Relative tolerance of 'optimal': a plan is only sought if faster than the best one by more than this
fraction (float64 sums of the same plan in another order differ by ~1e-16)."""


class DPSolver:
    """Exact Pareto-front DP with an enumerated transient cap (chain problems only; the ILP takes graphs)."""

    name = "dp"

    def __init__(self):
        # the first use of the compiled kernels in a process loads them from numba's cache (~0.4 s; ~10 s
        # to compile after an install): done here, once, so that `solve_time_s` times the solve alone
        warm_up()

    def solve(self, problem: SearchProblem) -> Solution:
        started = time.perf_counter()
        if not problem.is_chain:
            raise UserInputError("solver dp needs switch edges along the chain of decisions; use ilp for graphs")
        table = CapTable.build(problem)
        if table.peak_floor.min() > problem.budget_bytes:
            return infeasible_solution(problem, self.name, started, table)
        caps, best = bound_caps(problem, table)
        search_caps(problem, table, caps, best)
        return make_solution(problem, best.plan, "optimal", self.name, started)


@dataclass
class CapBounds:
    """What `bound_caps` knows about each cap c (index into `CapTable.caps`)."""

    kept_budget: np.ndarray
    """[C] int64 budget - fixed bytes - caps[c]: what the kept bytes of a plan under cap c may sum to."""
    lower: np.ndarray
    """[C] Lagrangian lower bound on the time of every fitting plan under cap c (inf: nothing fits)."""
    lam: np.ndarray
    """[C] the multiplier that gave each cap its bound."""


@dataclass
class Best:
    """The fastest fitting plan found so far. A plan counts as progress only when faster than `target`."""

    plan: np.ndarray
    time: float
    polished: np.ndarray | None = None
    """The plan `polish` last returned (a plan is polished once)."""

    @property
    def target(self) -> float:
        return self.time * (1 - RTOL)

    def polish(self, problem: SearchProblem) -> None:
        """Single-decision moves from the best plan (`greedy.improve`): a faster plan tightens every later
        bound."""
        if self.polished is not self.plan:
            self.plan = self.polished = improve(problem, self.plan, 4 * problem.num_decisions)
            self.time = problem.time_of(self.plan)


def allowed_times(problem: SearchProblem, table: CapTable, c: int) -> np.ndarray:
    """[L, O] times with inf where the option is not allowed under cap c."""
    return np.where(problem.effective_transient <= table.caps[c], problem.time_s, np.inf)


def bound_caps(problem: SearchProblem, table: CapTable) -> tuple[CapBounds, Best]:
    """Phase 1: Lagrangian bounds for every cap at once, and the first best plan.

    Multipliers around those of two reference caps: the largest cap that fits (where the budget binds
    most), then the cap of least bound so far. Their LP-rounded relaxed plans (`rounded_plan`) fit; the
    faster is the first best plan."""
    kept_budgets = problem.budget_bytes - problem.fixed_bytes - table.caps  # [C]
    fits = table.peak_floor <= problem.budget_bytes
    lower = np.full(table.caps.size, -np.inf)
    lam_of = np.zeros(table.caps.size)  # the multiplier that gave each cap its bound
    best_plan, best_t, grid, refs = None, np.inf, set(), set()
    ref = int(np.flatnonzero(fits)[-1])
    while ref not in refs and len(refs) < 2:
        refs.add(ref)
        times = allowed_times(problem, table, ref)
        ref_lam, _, fit, _, over = dual_bound(times, problem.kept_bytes, int(kept_budgets[ref]))
        plan = rounded_plan(times, problem.kept_bytes, int(kept_budgets[ref]), fit, over)
        plan_t = problem.time_of(plan)
        if plan_t < best_t:
            best_plan, best_t = plan, plan_t
        for lam in sorted(({ref_lam * f for f in (0.6, 1.0, 1.6)} | {0.0}) - grid):
            summed = table.sum_min_allowed(problem.time_s + lam * problem.kept_bytes)
            bound = problem.fixed_time_s + summed - lam * kept_budgets
            bound -= 1e-9 * np.abs(bound)  # the step sums' rounding: a looser bound is still a bound
            lam_of = np.where(bound > lower, lam, lam_of)
            lower = np.maximum(lower, bound)
            grid.add(lam)
        ref = int(np.argmin(np.where(fits, lower, np.inf)))
    lower[~fits] = np.inf
    return CapBounds(kept_budgets, lower, lam_of), Best(best_plan, best_t)


def search_caps(problem: SearchProblem, table: CapTable, caps: CapBounds, best: Best) -> None:
    """Phase 2: visit the caps by ascending lower bound, in chunks of `CHUNK`, until the bound reaches the
    best time (`best` is updated in place)."""
    order = np.argsort(caps.lower, kind="stable")
    for pos in range(0, order.size, CHUNK):
        chunk = order[pos:pos + CHUNK]
        if not caps.lower[chunk[0]] < best.target:
            break  # no later cap can hold a faster plan
        _search_chunk(problem, table, caps, chunk, best)


def _search_chunk(problem: SearchProblem, table: CapTable, caps: CapBounds, chunk: np.ndarray, best: Best) -> None:
    """The caps of one chunk by ascending (switch-aware) bound: each cap's own Lagrangian plan may improve
    `best`; groups of up to `BUCKETS` caps still in play share one `search_group`."""
    bounds = caps.lower[chunk]
    if problem.switch_s.any():  # the switch-aware bound, batched over the chunk
        bounds = np.maximum(bounds, switch_bounds(problem, table, chunk, caps.lam[chunk], caps.kept_budget[chunk]))
    live = []  # (bound, cap, lam) of caps that may hold a faster plan, not yet searched
    for j in [*np.argsort(bounds, kind="stable"), None]:
        if j is not None and bounds[j] < best.target:
            c = int(chunk[j])
            lam, bound, plan, _, _ = dual_bound(allowed_times(problem, table, c), problem.kept_bytes,
                                                int(caps.kept_budget[c]))
            plan_t = problem.time_of(plan)
            if plan_t < best.target:
                best.time, best.plan = plan_t, plan
            live.append((problem.fixed_time_s + bound, c, lam))
            if len(live) < BUCKETS:
                continue
        best.polish(problem)
        live = sorted(x for x in live if x[0] < best.target)
        if live:  # one forward pass for the caps in play
            _, group, lams = zip(*live)
            found = search_group(problem, table, list(group), list(lams), best.target)
            live = []
            if found is not None and found[0] < best.time:
                best.time, best.plan = found
        if j is None or not bounds[j] < best.target:
            break


def search_group(problem: SearchProblem, table: CapTable, caps: list[int], lams: list[float], bound: float):
    """Phase 3: best plan under the caps `caps` (indices) with time below `bound`: (time, plan) or None.

    One forward pass serves several caps: a partial plan sits in the bucket of the least of these caps
    at or above its max transient so far, whose kept budget it must respect; fronts are kept per
    bucket (and last option). A heuristic pass first (fronts cut to the `BEAM` candidates of least
    Lagrangian bound) finds a fitting plan that tightens `bound` for the exact one.

    Before the pass, Lagrangian reduced-cost fixing: option o of decision l is dropped when every plan
    through it has a Lagrangian bound fixed_time + come[l, o] + v[l, o] + go[l, o] - lam * B >= bound,
    with v = time + lam * kept, come / go the least values before / after it (switch-aware) and B the
    largest kept budget in play (valid for every lam >= 0, and for every bucket, whose budgets are
    smaller). Each multiplier of `lams` (the dual multipliers of the caps in play) gives such a bound:
    an option goes when any of them drops it. Decisions left with one option are constants: the pass
    runs over the others only, the switch costs to and from a constant neighbour folded into the free
    decision's times (`reduce_constants`).

    Within the pass a partial plan (t, k) is dropped when k plus the least kept bytes of the rest
    exceeds its bucket's kept budget B, or when a lower bound on its completion reaches `bound`: t plus
    the least times of the rest, or, for any lam of `lams`, the Lagrangian bound t + lam * k
    + cost_to_go(time + lam * kept) - lam * B.
    """
    kept, eff = problem.kept_bytes, problem.effective_transient
    values = np.sort(table.caps[caps])  # the caps in play, ascending
    top = caps[int(np.argmax(table.caps[caps]))]
    times = allowed_times(problem, table, top)  # options allowed under the largest cap in play
    budgets = problem.budget_bytes - problem.fixed_bytes - values  # [B] kept budget of each bucket, descending
    sw = problem.switch_s if problem.switch_s.any() else None
    best = None
    # reduced-cost fixing against the loosest budget, with each cap's multiplier
    lams = np.unique(np.asarray(lams, dtype=np.float64))  # [J]
    through = []  # [J] of [L, O]
    for lam in lams:
        v = times + lam * kept
        through.append(cost_to_come(v, sw) + v + cost_to_go(v, sw) + problem.fixed_time_s - lam * budgets[0])
    bucket = np.minimum(np.searchsorted(values, eff), values.size - 1)  # [L, O]
    grouped = sw is not None or values.size > 1
    for beam in (BEAM, 0):  # a cut-down pass for a tighter bound, then the exact one
        margins = 1e-9 * (abs(bound) + lams * budgets[0])  # [J] float rounding of the Lagrangian sums
        alive = np.logical_and.reduce([th < bound + mg for th, mg in zip(through, margins)])
        if not alive.any(axis=1).all():
            return best  # some decision has no option that may lead to a faster plan
        r = reduce_constants(problem, np.where(alive, times, np.inf), bucket, sw)
        found = forward_pass(r, kept, budgets, lams, bound, margins, grouped, beam)
        if found is not None:
            plan = r.expand(found)
            best = float(problem.time_of(plan)), plan
            bound = best[0] * (1 - RTOL)
    return best
