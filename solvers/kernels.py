"""Compiled inner loops of the exact DP (`solvers.dp`) and of its Lagrangian bounds (`solvers.bounds`).

Why compiled: at L = 96 decisions and 8 options a DP solve makes thousands of small sequential steps
(Viterbi passes along the chain, bisections on the Lagrange multiplier, one Pareto step per decision). As
numpy calls each step costs microseconds of call overhead, which kept the median solve above the 5 ms
target of issue #3 (`paradyse-lab bench-solvers`). numba compiles these loops on first use and caches the
machine code next to this file (`cache=True`): only the first process after an install pays the compile
(a few seconds); `warm_up()` makes that happen before anything is timed.

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
def lagrangian_dual(times, kept, kept_budget, iterations):
    """See `solvers.bounds.dual_bound`: (lambda, bound, fitting plan, least fitting lambda seen, the relaxed
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
            plan[:] = trial
            fitted = True
            break
        over[:] = trial
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
            plan[:] = trial
        else:
            lo = mid
            over[:] = trial
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
            to_go[:] = nxt
        out[k] = to_go.min()
    return out


@njit(cache=True)
def keep_across_options(t, k, b, o, reach, n_buckets):
    """Mask of the states (given in ascending t) not dominated across last options: state p is dropped when
    a state q of its bucket or a lower one has q.k <= p.k and q.t + reach[o_p] < p.t. reach[o] bounds what
    any state saves on the next switch over one ending in o (max over o', x of switch[o', x] - switch[o, x]),
    so every completion of p is then strictly slower than the same completion of q, whose budget is no
    smaller."""
    n = t.size
    alive = np.ones(n, np.bool_)
    counts = np.zeros(n_buckets + 1, np.int64)
    for i in range(n):
        counts[b[i] + 1] += 1
    for j in range(n_buckets):
        counts[j + 1] += counts[j]
    fill = counts[:-1].copy()
    members = np.empty(n, np.int64)  # states grouped by bucket, each group in ascending t
    for i in range(n):
        members[fill[b[i]]] = i
        fill[b[i]] += 1
    least_k = np.empty(n, np.int64)  # per group: least kept among its first j states
    seg_t = np.empty(n)
    for j in range(n_buckets):
        lo, hi = counts[j], counts[j + 1]
        run = np.iinfo(np.int64).max
        for q in range(lo, hi):
            run = min(run, k[members[q]])
            least_k[q] = run
            seg_t[q] = t[members[q]]
    for p in range(n):
        for j in range(b[p] + 1):  # buckets at or below p's: their states fit wherever p's completions do
            lo, hi = counts[j], counts[j + 1]
            faster = np.searchsorted(seg_t[lo:hi], t[p] - reach[o[p]])  # states with t < t_p - reach
            if faster > 0 and least_k[lo + faster - 1] <= k[p]:
                alive[p] = False
                break
    return alive


@njit(cache=True)
def _lagrange_slack(t, k, room, lams, lam_cap, i, o):
    """max over multipliers j of t + lams[j] * (k - room) - lam_cap[j, i, o]: negative when no multiplier's
    Lagrangian bound on the completions of this partial plan reaches the bound."""
    worst = -np.inf
    for j in range(lams.size):
        worst = max(worst, t + lams[j] * (k - room) - lam_cap[j, i, o])
    return worst


@njit(cache=True)
def pareto_pass(times, kept, bucket, switch, adjacent, reach, time_cap, lam_cap, rest_k, budgets,
                t0, k0, b0, lams, grouped, n_buckets, beam):
    """The forward Pareto pass of `solvers.dp.DPSolver._pass` over m free decisions: (found, plan [m]).

    A partial plan is a state (time, kept, bucket, last option). Extending it by option o at step i gives a
    candidate that is admissible when time < time_cap[i, o], kept <= budgets[bucket] - rest_k[i] and, for
    every multiplier j, time + lams[j] * (kept - budgets[bucket]) < lam_cap[j, i, o]. The next front holds
    the admissible candidates that no other weakly dominates in (time, kept) among those with the same last
    option (when there are switch costs) and a bucket at or below theirs (when `grouped`; else one bucket):
    a lower bucket has the larger kept budget and puts every completion in a bucket no higher. With switch
    costs, `keep_across_options` prunes across last options too, with reach [O]. switch [O, O] ([0, 0]: no
    switch costs) is charged into step i when adjacent[i].

    beam > 0 makes it a heuristic: at each step only the `beam` admissible candidates of least Lagrangian
    bound are kept. The plan it finds still meets every constraint (an upper bound for the exact pass); it
    may not be the best.
    """
    m, O = times.shape
    has_steps = switch.shape[0] > 0
    width = O if has_steps else 1  # groups: (bucket, last option) with switch costs, else bucket
    n_groups = n_buckets * width if grouped else width
    ft = np.empty(O)
    fk = np.empty(O, np.int64)
    fb = np.empty(O, np.int64)
    fo = np.empty(O, np.int64)
    S = 0
    for o in range(O):
        t = t0 + times[0, o]
        kk = k0 + kept[0, o]
        bb = max(b0, bucket[0, o])
        room = budgets[bb]
        if (t < time_cap[0, o] and kk <= room - rest_k[0]
                and _lagrange_slack(t, kk, room, lams, lam_cap, 0, o) < 0):
            ft[S], fk[S], fb[S], fo[S] = t, kk, bb, o
            S += 1
    hist_opt = np.empty(max(1024, 4 * O), np.int64)
    hist_par = np.empty(hist_opt.size, np.int64)
    start = np.zeros(m + 1, np.int64)  # history of step i: hist_*[start[i]:start[i + 1]]
    hist_opt[:S] = fo[:S]
    hist_par[:S] = 0
    start[1] = S
    runmin = np.empty(n_groups, np.int64)
    for i in range(1, m):
        if S == 0:
            return False, np.empty(0, np.int64)
        ct = np.empty(S * O)
        ck = np.empty(S * O, np.int64)
        cb = np.empty(S * O, np.int64)
        co = np.empty(S * O, np.int64)
        cp = np.empty(S * O, np.int64)
        n = 0
        charge = has_steps and adjacent[i]
        for s in range(S):
            for o in range(O):
                t = ft[s] + times[i, o]
                if charge:
                    t += switch[fo[s], o]
                kk = fk[s] + kept[i, o]
                bb = max(fb[s], bucket[i, o])
                room = budgets[bb]
                if (t < time_cap[i, o] and kk <= room - rest_k[i]
                        and _lagrange_slack(t, kk, room, lams, lam_cap, i, o) < 0):
                    ct[n], ck[n], cb[n], co[n], cp[n] = t, kk, bb, o, s
                    n += 1
        if n == 0:
            return False, np.empty(0, np.int64)
        if beam > 0 and n > beam:  # heuristic mode: only the candidates of least Lagrangian bound go on
            score = np.empty(n)
            for c in range(n):
                score[c] = _lagrange_slack(ct[c], ck[c], budgets[cb[c]], lams, lam_cap, i, co[c])
            chosen = np.argpartition(score, beam - 1)[:beam]
            ct[:beam], ck[:beam], cb[:beam], co[:beam], cp[:beam] = (ct[chosen], ck[chosen], cb[chosen],
                                                                     co[chosen], cp[chosen])
            n = beam
        order = np.argsort(ct[:n])
        runmin[:] = np.iinfo(np.int64).max
        keep = np.empty(n, np.int64)
        S = 0
        for j in range(n):
            c = order[j]
            last = co[c] if has_steps else 0
            least = np.iinfo(np.int64).max  # least kept of an earlier (faster) state in a bucket at or below
            for bb in range(cb[c] + 1 if grouped else 1):
                least = min(least, runmin[bb * width + last])
            if ck[c] < least:
                g = cb[c] * width + last if grouped else 0
                runmin[g] = min(runmin[g], ck[c])
                keep[S] = c
                S += 1
        keep = keep[:S]
        if has_steps and S > O and i + 1 < m and adjacent[i + 1]:
            alive = keep_across_options(ct[keep], ck[keep], cb[keep], co[keep], reach, n_buckets)
            keep = keep[alive]
            S = keep.size
        ft, fk, fb, fo = ct[keep], ck[keep], cb[keep], co[keep]
        if start[i] + S > hist_opt.size:
            grown = max(2 * hist_opt.size, start[i] + S)
            hist_opt = np.concatenate((hist_opt, np.empty(grown - hist_opt.size, np.int64)))
            hist_par = np.concatenate((hist_par, np.empty(grown - hist_par.size, np.int64)))
        hist_opt[start[i]:start[i] + S] = fo
        hist_par[start[i]:start[i] + S] = cp[keep]
        start[i + 1] = start[i] + S
    if S == 0:
        return False, np.empty(0, np.int64)
    j = int(np.argmin(ft[:S]))
    plan = np.empty(m, np.int64)
    for i in range(m - 1, -1, -1):
        plan[i] = hist_opt[start[i] + j]
        j = hist_par[start[i] + j]
    return True, plan


def writable(a, dtype) -> np.ndarray:
    """`a` as a C-contiguous, writable array of `dtype` (copied only when it is not one already).

    Every argument array goes through this, so each kernel sees one type per argument and compiles (or
    loads from the cache) one specialisation, the one `warm_up` makes: numba types a read-only array (as
    `SearchProblem` keeps its tables) apart from a writable one and would compile again on first use."""
    return np.require(a, dtype, ("C", "W"))


_warm = False


def warm_up() -> None:
    """Compile (or load from the cache) every kernel on a tiny problem, so no timed call pays for it; once
    per process."""
    global _warm
    if _warm:
        return
    _warm = True
    times = np.array([[1.0, 2.0], [1.5, 1.0]])
    kept = np.array([[5, 1], [4, 2]], dtype=np.int64)
    steps = np.zeros((1, 2, 2))
    lagrangian_dual(times, kept, 6, 4)
    viterbi_to_go(times, steps)
    viterbi_to_come(times, steps)
    capped_viterbi_totals(times, kept, kept, np.array([5], np.int64), np.array([0.5]), steps[0])
    zeros = np.zeros((2, 2), dtype=np.int64)
    for sw in (np.zeros((0, 0)), np.zeros((2, 2))):
        pareto_pass(times, kept, zeros, sw, np.ones(2, np.bool_), np.zeros(2), np.full((2, 2), 9.0),
                    np.full((1, 2, 2), 9.0), np.zeros(2, np.int64), np.array([9], np.int64), 0.0, 0, 0,
                    np.zeros(1), True, 1, 0)
    keep_across_options(np.array([1.0, 2.0]), np.array([2, 1], np.int64), np.zeros(2, np.int64),
                        np.zeros(2, np.int64), np.zeros(2), 1)
