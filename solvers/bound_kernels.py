"""Compiled inner loops of the exact DP's Lagrangian bounds (`paradyse_lab.solvers.bounds`): the relaxed plan of a
multiplier
(`_relaxed`), the bisection on the multiplier (`lagrangian_dual`) and the Viterbi passes along the chain
(`viterbi_to_go`, `viterbi_to_come`, `capped_viterbi_totals`).

Why compiled, why copies are loops (`_copy_into`) and how the kernels are warmed up: the `kernels` module
docstring (its `warm_up()` compiles these kernels too, under the same lock). These kernels call no kernel of
another file and no kernel of another file calls them: numba checks a cached function against its own file only,
so kernels that call each other share a file, and this group can live apart from the Pareto pass's.

Conventions: times are float64 with inf for an option that is not allowed; kept bytes are exact int64.
Switch matrices come as `steps` [S, O, O]: S == 1 is one matrix for every step, otherwise step l is the
switch from decision l - 1 into decision l.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _relaxed(times, kept, lam, plan):
    """Fill `plan` with argmin_o (time + lam * kept) per decision (first on ties); return (the sum of those
    minima, the plan's kept bytes)."""
    L, O = times.shape
    total = 0.0
    used = 0
    for l in range(L):
        best = np.inf
        arg = 0
        for o in range(O):
            v = times[l, o] + lam * kept[l, o]
            if v < best:
                best = v
                arg = o
        plan[l] = arg
        total += best
        used += kept[l, arg]
    return total, used


@njit(cache=True)
def _copy_into(dst, src):
    """dst[:] = src for two int64 vectors of one size (a loop: numba compiles slice assignment slowly)."""
    for j in range(src.size):
        dst[j] = src[j]


@njit(cache=True)
def lagrangian_dual(times, kept, kept_budget, iterations):
    """See `paradyse_lab.solvers.bounds.dual_bound`: (lambda, bound, fitting plan, least fitting lambda seen, the
    relaxed
    plan at the bracket's lower end, which does not fit unless nothing binds)."""
    L, O = times.shape
    plan = np.empty(L, np.int64)
    trial = np.empty(L, np.int64)
    bound, used = _relaxed(times, kept, 0.0, plan)
    if used <= kept_budget:
        return 0.0, bound, plan, 0.0, plan.copy()
    over = plan.copy()
    t_lo, t_hi, k_sum = np.inf, -np.inf, 0.0
    for l in range(L):
        for o in range(O):
            k_sum += kept[l, o]
            t = times[l, o]
            if t < np.inf:
                t_lo = min(t_lo, t)
                t_hi = max(t_hi, t)
    lo = 0.0
    hi = max(t_hi - t_lo, 1e-30) / max(k_sum / (L * O), 1.0)
    best_lam = 0.0
    fitted = False
    for _ in range(200):  # grow hi until the relaxed plan fits (it does once lambda exceeds every time gap)
        b, used = _relaxed(times, kept, hi, trial)
        b -= hi * kept_budget
        if b > bound:
            bound, best_lam = b, hi
        if used <= kept_budget:
            _copy_into(plan, trial)
            fitted = True
            break
        _copy_into(over, trial)
        lo, hi = hi, hi * 16
    if not fitted:
        raise ValueError("lagrangian_dual: no plan fits the kept budget")
    for _ in range(iterations):
        mid = (lo + hi) / 2 if lo == 0.0 else np.sqrt(lo * hi)
        b, used = _relaxed(times, kept, mid, trial)
        b -= mid * kept_budget
        if b > bound:
            bound, best_lam = b, mid
        if used <= kept_budget:
            hi = mid
            _copy_into(plan, trial)
        else:
            lo = mid
            _copy_into(over, trial)
    return best_lam, bound, plan, hi, over


@njit(cache=True)
def viterbi_to_go(values, steps):
    """[L, O] least sum of `values` over the decisions after l plus the switches from l's option on."""
    L, O = values.shape
    out = np.zeros((L, O))
    for l in range(L - 2, -1, -1):
        s = 0 if steps.shape[0] == 1 else l + 1
        for o in range(O):
            best = np.inf
            for x in range(O):
                v = steps[s, o, x] + (values[l + 1, x] + out[l + 1, x])
                if v < best:
                    best = v
            out[l, o] = best
    return out


@njit(cache=True)
def viterbi_to_come(values, steps):
    """[L, O] least sum of `values` over the decisions before l plus the switches up to and into l's option."""
    L, O = values.shape
    out = np.zeros((L, O))
    for l in range(1, L):
        s = 0 if steps.shape[0] == 1 else l
        for o in range(O):
            best = np.inf
            for x in range(O):
                v = (values[l - 1, x] + out[l - 1, x]) + steps[s, x, o]
                if v < best:
                    best = v
            out[l, o] = best
    return out


@njit(cache=True)
def capped_viterbi_totals(times, kept, transient, caps, lams, switch):
    """[K] for each cap caps[k] with multiplier lams[k]: the least over plans of the sum of
    time + lams[k] * kept plus the switches [O, O] between consecutive decisions, options with transient
    above the cap left out (a backward Viterbi pass per cap)."""
    L, O = times.shape
    out = np.empty(caps.size)
    to_go = np.empty(O)
    nxt = np.empty(O)
    for k in range(caps.size):
        for o in range(O):  # the last decision's values
            to_go[o] = times[L - 1, o] + lams[k] * kept[L - 1, o] if transient[L - 1, o] <= caps[k] else np.inf
        for l in range(L - 2, -1, -1):
            for o in range(O):
                best = np.inf
                for x in range(O):
                    best = min(best, switch[o, x] + to_go[x])
                v = times[l, o] + lams[k] * kept[l, o] if transient[l, o] <= caps[k] else np.inf
                nxt[o] = v + best
            to_go, nxt = nxt, to_go
        least_total = to_go[0]  # to_go.min() as numba computes it: the first NaN, else the least value
        for o in range(O):
            if to_go[o] != to_go[o]:
                least_total = to_go[o]
                break
            if to_go[o] < least_total:
                least_total = to_go[o]
        out[k] = least_total
    return out

