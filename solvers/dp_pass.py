"""One forward pass of the exact DP over a chain (`paradyse_lab.solvers.dp` runs it for each group of caps:
`search_group`).

Before the pass, the decisions left with one allowed option (after reduced-cost fixing) leave the chain as
constants (`reduce_constants`, giving a `Reduced` chain): their time, kept bytes and bucket start every state, and
the switch cost to or from a constant neighbour is folded into the free decision's times. `pass_tables` builds the
kernel's input (`kernels.PassTables`: the free decisions' times, kept bytes and buckets, and the pruning tables),
`forward_pass` runs the compiled Pareto pass (`kernels.pareto_pass`) on it, and `Reduced.expand` puts the
constants back into the plan it finds.

The search around it (the caps, their bounds, reduced-cost fixing, the beam pass before the exact one) and why it
is exact: the `dp` module docstring.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.solvers.base import BIG
from paradyse_lab.solvers.bounds import cost_to_go
from paradyse_lab.solvers.kernels import PassTables, pareto_pass, writable


def forward_pass(r: Reduced, kept: np.ndarray, budgets: np.ndarray, lams: np.ndarray, bound: float,
                 margins: np.ndarray, grouped: bool, beam: int = 0):
    """The forward Pareto pass over the free decisions of `r` (`kernels.pareto_pass` on `pass_tables`):
    their options (a plan of the free decisions) of the fastest plan below `bound` that fits its bucket,
    or None."""
    if r.times.shape[0] == 0:  # every decision fixed: the plan is the constants
        fits = r.kept <= budgets[r.bucket0] and r.time + r.fixed_time < bound
        return np.empty(0, dtype=np.int64) if fits else None
    found, plan = pareto_pass(pass_tables(r, kept, budgets, lams, bound, margins, grouped), beam)
    return plan if found else None


def pass_tables(r: Reduced, kept: np.ndarray, budgets: np.ndarray, lams: np.ndarray, bound: float,
                margins: np.ndarray, grouped: bool) -> PassTables:
    """The kernel's input (`kernels.PassTables`): the free decisions' times and kept bytes, and the
    pruning tables: per step and option the time below which a state can still beat `bound` (least times
    of the rest, and each multiplier's Lagrangian bound of the rest), the least kept bytes of the rest."""
    times, kept_r = r.times, kept[r.free]
    O = times.shape[1]
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
    return PassTables(
        times=writable(times, f8), kept=writable(kept_r, i8), bucket=writable(r.bucket, i8),
        switch=writable(switch, f8), adjacent=writable(r.adjacent, np.bool_), reach=writable(reach, f8),
        time_cap=writable(bound - rest_t, f8), lam_cap=writable(lam_cap, f8), rest_k=writable(rest_k, i8),
        budgets=writable(budgets, i8), lams=writable(lams, f8), t0=float(r.time), k0=int(r.kept),
        b0=int(r.bucket0), grouped=bool(grouped))


@dataclass
class Reduced:
    """A chain problem with its one-option decisions taken out as constants (see `reduce_constants`)."""

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

    def expand(self, free_plan: np.ndarray) -> np.ndarray:
        """[L] the full plan: the constants, and `free_plan` [m] at the free decisions."""
        plan = self.plan.copy()
        plan[self.free] = free_plan
        return plan


def reduce_constants(problem: SearchProblem, times: np.ndarray, bucket: np.ndarray, sw: np.ndarray | None) -> Reduced:
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
