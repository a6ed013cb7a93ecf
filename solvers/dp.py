"""Exact dynamic programming over decisions x options x memory (Pareto fronts), for chain problems.

The peak is fixed + sum of kept + max of transient: the max term is not additive, so the DP enumerates
the cap c on it, over the distinct values of max(transient, fixed transient) (`CapTable`). Under cap c only
options with effective transient <= c are allowed and the kept bytes may sum to at most
budget - fixed - c. Every plan is feasible under the cap equal to its own max term, so the best over all
caps is the optimum.

For one cap, a forward pass over the decisions keeps, per last option (the state needs it only when some
switch cost is non-zero), the Pareto front of (time, kept bytes) of partial plans: no point is kept that
another beats or equals in both. With switch costs a state is also dropped when one ending in another
option is faster by more than the most the next switch can differ (`kernels.keep_across_options`). The pass is
compiled (`solvers.kernels.pareto_pass`), and a cut-down run of it (`BEAM` states per step) goes first
to find a near-optimal plan whose time tightens every bound of the exact run. Before each pass,
Lagrangian reduced-cost fixing removes the options no plan faster than the best one can use, and the
decisions left with one option leave the pass as constants (`_reduce`). Memory is exact int64 bytes,
never discretised, so no plan over budget is accepted and none that fits is lost; time is float64. A
partial plan is pruned when the least kept bytes of the remaining decisions would break the kept budget,
or when a lower bound on its completion (least remaining times, or the switch-aware Lagrangian bound of
`solvers.bounds`) reaches the best time found.

The best time starts at the LP-rounded plans (`bounds.rounded_plan`) of two reference caps, improved by
the Lagrangian plans and single-decision moves (`greedy.improve`). Caps are visited by ascending
Lagrangian lower bound and skipped once that bound reaches the best time: they cannot hold a faster plan.
Up to `BUCKETS` caps still in play share one forward pass: a partial plan is checked against the budget
of the least of them at or above its max transient, and fronts are kept per such bucket, which is the
same search as one pass per cap (a state may also be dropped for one of a lower bucket: that bucket's
budget is larger and its completions land in buckets no higher).

Optimal means no plan is faster by more than `RTOL` (1e-12) of the time. The answer is re-costed and
checked exactly by `make_solution`. Status is 'optimal', or 'infeasible' when even the least-peak plan
(`min_peak_plan`) does not fit. Measured: `paradyse-lab bench-solvers` (results/solver_bench.csv).

Example: `paradyse-lab plan --model gpt --seq 256K --solver dp --recompute --granularity sublayer`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from paradyse_lab.errors import UserInputError
from paradyse_lab.search_problem import SearchProblem
from solvers.base import BIG, CapTable, Solution, infeasible_solution, make_solution
from solvers.bounds import cost_to_come, cost_to_go, dual_bound, rounded_plan, switch_bounds
from solvers.greedy import improve
from solvers.kernels import pareto_pass, warm_up, writable

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
        kept_budgets = problem.budget_bytes - problem.fixed_bytes - table.caps  # [C]
        fits = table.peak_floor <= problem.budget_bytes
        # Lagrangian bounds for every cap at once, from multipliers around those of two reference caps: the
        # largest cap that fits (where the budget binds most), then the cap of least bound so far. Their
        # relaxed plans that fit are the first best plans.
        lower = np.full(table.caps.size, -np.inf)
        lam_of = np.zeros(table.caps.size)  # the multiplier that gave each cap its bound
        best_plan, best_t, grid, refs = None, np.inf, set(), set()
        ref = int(np.flatnonzero(fits)[-1])
        while ref not in refs and len(refs) < 2:
            refs.add(ref)
            times = self._times(problem, table, ref)
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
        improved = None
        order = np.argsort(lower, kind="stable")
        for pos in range(0, order.size, CHUNK):  # caps by ascending bound, in chunks
            chunk = order[pos:pos + CHUNK]
            if not lower[chunk[0]] < best_t * (1 - RTOL):
                break  # no later cap can hold a faster plan
            bounds = lower[chunk]
            if problem.switch_s.any():  # the switch-aware bound, batched over the chunk
                bounds = np.maximum(bounds, switch_bounds(problem, table, chunk, lam_of[chunk], kept_budgets[chunk]))
            live = []  # (bound, cap, lam) of caps that may hold a faster plan, not yet searched
            for j in [*np.argsort(bounds, kind="stable"), None]:
                target = best_t * (1 - RTOL)  # only a plan faster than target counts
                if j is not None and bounds[j] < target:
                    c = int(chunk[j])
                    lam, bound, plan, _, _ = dual_bound(self._times(problem, table, c), problem.kept_bytes,
                                                        int(kept_budgets[c]))
                    plan_t = problem.time_of(plan)
                    if plan_t < target:
                        best_t, best_plan = plan_t, plan
                    live.append((problem.fixed_time_s + bound, c, lam))
                    if len(live) < BUCKETS:
                        continue
                if improved is not best_plan:  # a better start plan tightens every bound below
                    best_plan = improved = improve(problem, best_plan, 4 * problem.num_decisions)
                    best_t = problem.time_of(best_plan)
                live = sorted(x for x in live if x[0] < best_t * (1 - RTOL))
                if live:  # one forward pass for the caps in play
                    _, caps, lams = zip(*live)
                    found = self._front(problem, table, list(caps), list(lams), best_t * (1 - RTOL))
                    live = []
                    if found is not None and found[0] < best_t:
                        best_t, best_plan = found
                if j is None or not bounds[j] < best_t * (1 - RTOL):
                    break
        return make_solution(problem, best_plan, "optimal", self.name, started)

    @staticmethod
    def _times(problem: SearchProblem, table: CapTable, c: int) -> np.ndarray:
        """[L, O] times with inf where the option is not allowed under cap c."""
        return np.where(problem.effective_transient <= table.caps[c], problem.time_s, np.inf)

    def _front(self, problem: SearchProblem, table: CapTable, caps: list[int], lams: list[float], bound: float):
        """Best plan under the caps `caps` (indices) with time below `bound`: (time, plan) or None.

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
        decision's times (`_reduce`).

        Within the pass a partial plan (t, k) is dropped when k plus the least kept bytes of the rest
        exceeds its bucket's kept budget B, or when a lower bound on its completion reaches `bound`: t plus
        the least times of the rest, or, for any lam of `lams`, the Lagrangian bound t + lam * k
        + cost_to_go(time + lam * kept) - lam * B.
        """
        kept, eff = problem.kept_bytes, problem.effective_transient
        values = np.sort(table.caps[caps])  # the caps in play, ascending
        top = caps[int(np.argmax(table.caps[caps]))]
        times = self._times(problem, table, top)  # options allowed under the largest cap in play
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
            r = _reduce(problem, np.where(alive, times, np.inf), bucket, sw)
            found = self._pass(r, kept, budgets, lams, bound, margins, grouped, beam)
            if found is not None:
                plan = r.plan.copy()
                plan[r.free] = found
                best = float(problem.time_of(plan)), plan
                bound = best[0] * (1 - RTOL)
        return best

    @staticmethod
    def _pass(r: Reduced, kept: np.ndarray, budgets: np.ndarray, lams: np.ndarray, bound: float,
              margins: np.ndarray, grouped: bool, beam: int = 0):
        """The forward Pareto pass over the free decisions of `r`: their options (a plan of the free
        decisions) of the fastest plan below `bound` that fits its bucket, or None."""
        times, kept_r = r.times, kept[r.free]
        m, O = times.shape
        if m == 0:  # every decision fixed: the plan is the constants
            fits = r.kept <= budgets[r.bucket0] and r.time + r.fixed_time < bound
            return np.empty(0, dtype=np.int64) if fits else None
        kept_r = np.where(np.isfinite(times), kept_r, BIG)
        if r.switch is not None:  # reach[o]: the most a state ending in any option saves over one ending in o
            switch = r.switch
            reach = (switch[:, None, :] - switch[None, :, :]).max(axis=2).max(axis=0)  # [O', O, x] -> [O]
        else:
            switch, reach = np.zeros((0, 0)), np.zeros(O)
        rest_t = cost_to_go(times, r.steps) + r.fixed_time  # [m, O]
        lam_cap = np.stack([bound + mg - cost_to_go(times + lam * kept_r, r.steps) - r.fixed_time
                            for lam, mg in zip(lams, margins)])  # [J, m, O]
        rest_k = np.append(np.cumsum(kept_r.min(axis=1)[::-1])[::-1][1:], 0)  # [m]
        f8, i8 = np.float64, np.int64
        found, plan = pareto_pass(
            writable(times, f8), writable(kept_r, i8), writable(r.bucket, i8), writable(switch, f8),
            writable(r.adjacent, np.bool_), writable(reach, f8), writable(bound - rest_t, f8),
            writable(lam_cap, f8), writable(rest_k, i8), writable(budgets, i8), float(r.time), int(r.kept),
            int(r.bucket0), writable(lams, f8), bool(grouped), int(budgets.size), int(beam))
        return plan if found else None


@dataclass
class Reduced:
    """A chain problem with its one-option decisions taken out as constants (see `_reduce`)."""

    free: np.ndarray
    """[m] indices of the decisions with more than one option left."""
    plan: np.ndarray
    """[L] the option of every constant decision (free ones: 0, to be filled)."""
    times: np.ndarray
    """[m, O] times of the free decisions (inf: dropped), switch costs to / from constant neighbours added."""
    bucket: np.ndarray
    """[m, O] bucket of each free decision's options."""
    steps: np.ndarray | None
    """[m, O, O] switch from free decision i - 1 into i (zero unless adjacent), or None without switches."""
    switch: np.ndarray | None
    """[O, O] the problem's switch costs (charged between adjacent free decisions), or None without."""
    adjacent: np.ndarray
    """[m] whether free decision i directly follows free decision i - 1."""
    time: float
    """Time of the constant decisions and of the switches between them."""
    kept: int
    """Kept bytes of the constant decisions."""
    bucket0: int
    """Largest bucket among the constant decisions (0 when none)."""
    fixed_time: float
    """The problem's fixed time."""


def _reduce(problem: SearchProblem, times: np.ndarray, bucket: np.ndarray, sw: np.ndarray | None) -> Reduced:
    """Take the decisions with one finite option out of the chain as constants.

    A free decision whose neighbour is constant pays the switch between them whatever the rest does, so
    that cost is added to its times; two adjacent constants add theirs to the constant time.
    """
    L, O = times.shape
    finite = np.isfinite(times)
    single = finite.sum(axis=1) == 1  # [L]
    plan = np.where(single, np.argmax(finite, axis=1), 0)
    rows = np.flatnonzero(single)
    free = np.flatnonzero(~single)
    const_time = float(times[rows, plan[rows]].sum())
    const_kept = int(problem.kept_bytes[rows, plan[rows]].sum())
    bucket0 = int(bucket[rows, plan[rows]].max()) if rows.size else 0
    t = times[free].copy()
    adjacent = np.zeros(free.size, dtype=bool)
    adjacent[1:] = np.diff(free) == 1
    steps = None
    if sw is not None:
        both = single[:-1] & single[1:]  # constant-to-constant edges
        const_time += float(sw[plan[:-1][both], plan[1:][both]].sum())
        before = free - 1
        has_before = (before >= 0) & single[np.maximum(before, 0)]
        t[has_before] += sw[plan[before[has_before]]]  # [k, O]: from the constant before into each option
        after = free + 1
        has_after = (after < L) & single[np.minimum(after, L - 1)]
        t[has_after] += sw[:, plan[after[has_after]]].T  # [k, O]: from each option into the constant after
        steps = np.where(adjacent[:, None, None], sw[None], 0.0)  # [m, O, O]
    return Reduced(free=free, plan=plan, times=t, bucket=bucket[free], steps=steps, switch=sw, adjacent=adjacent,
                   time=const_time, kept=const_kept, bucket0=bucket0, fixed_time=problem.fixed_time_s)
