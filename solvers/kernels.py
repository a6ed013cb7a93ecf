"""Compiled inner loops of the exact DP's forward Pareto pass (`paradyse_lab.solvers.dp_pass`), and `warm_up()`, which
compiles
them and those of its Lagrangian bounds (for `paradyse_lab.solvers.bounds`).

Why compiled: at L = 96 decisions and 8 options a DP solve makes thousands of small sequential steps
(Viterbi passes along the chain, bisections on the Lagrange multiplier, one Pareto step per decision). As
numpy calls each step costs microseconds of call overhead, which kept the median solve above the 5 ms
target (`paradyse-lab solvers bench`). numba compiles these loops on first use and caches the
machine code next to this file (`cache=True`): only the first process after an install pays the compile
(~20 CPU s, under half of what the numpy calls below cost); `warm_up()` makes that happen before anything is
timed.

Compile cost: numba types and lowers each numpy library call it meets anew (slice assignment `a[:] = b`
~3.5 s, `np.argpartition` ~10 s with its argument checks, `np.argsort` with a list of named tuples as its
stack, `np.searchsorted` ~1.3 s), while a plain loop costs next to nothing. So copies, gathers and fills here
are loops, and the two orderings and the bisection are numba's own algorithms without their wrappers
(`_argsort`, `_least`, `_first_not_before`): they return exactly the indices, in the same order, ties and NaN
included, that numba's `np.argsort`, `np.argpartition` and `np.searchsorted` do.
Kernels that call each other share a file: numba checks a cached function against its own file only, so a
kernel calling one compiled from another file could run that one's stale machine code after an edit there. The
bound kernels call no kernel here and none here calls them, so they live apart; every
kernel here is reached from `pareto_pass`, so they all stay in this file.

Conventions: times are float64 with inf for an option that is not allowed; kept bytes are exact int64.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import NamedTuple

import numpy as np
from numba import njit

from paradyse_lab.solvers.bound_kernels import capped_viterbi_totals, lagrangian_dual, viterbi_to_come, viterbi_to_go

INT64_MAX = np.iinfo(np.int64).max


@njit(cache=True)
def _first_not_before(a, lo, hi, v):
    """The first index j in lo..hi of the ascending a[lo:hi] whose value does not sort before v (hi when every
    one does): lo + numba's `np.searchsorted(a[lo:hi], v)` (side 'left'), the same bisection without its
    wrapper. From numba 0.68 (BSD-2-Clause): numba/np/arraymath.py `_searchsorted` with `_less_than`, whose
    float order is `_before`'s; numba's copyright notice and license are in THIRD_PARTY_NOTICES.md."""
    while lo < hi:
        mid = lo + ((hi - lo) >> 1)
        if _before(a[mid], v):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def keep_across_options(t, k, b, o, reach, n_buckets):
    """Indices (ascending) of the states (given in ascending t) not dominated across last options: state p is
    dropped when
    a state q of its bucket or a lower one has q.k <= p.k and q.t + reach[o_p] < p.t. reach[o] bounds what
    any state saves on the next switch over one ending in o (max over o', x of switch[o', x] - switch[o, x]),
    so every completion of p is then strictly slower than the same completion of q, whose budget is no
    smaller."""
    n = t.size
    counts = np.zeros(n_buckets + 1, np.int64)
    for i in range(n):
        counts[b[i] + 1] += 1
    fill = np.empty(n_buckets, np.int64)
    for j in range(n_buckets):
        fill[j] = counts[j]
        counts[j + 1] += counts[j]
    members = np.empty(n, np.int64)  # states grouped by bucket, each group in ascending t
    for i in range(n):
        members[fill[b[i]]] = i
        fill[b[i]] += 1
    least_k = np.empty(n, np.int64)  # per group: least kept among its first j states
    seg_t = np.empty(n)
    for j in range(n_buckets):
        lo, hi = counts[j], counts[j + 1]
        run = INT64_MAX
        for q in range(lo, hi):
            run = min(run, k[members[q]])
            least_k[q] = run
            seg_t[q] = t[members[q]]
    survivors = np.empty(n, np.int64)
    kept_count = 0
    for p in range(n):
        alive = True
        for j in range(b[p] + 1):  # buckets at or below p's: their states fit wherever p's completions do
            lo, hi = counts[j], counts[j + 1]
            end = _first_not_before(seg_t, lo, hi, t[p] - reach[o[p]])  # states with t < t_p - reach: lo..end
            if end > lo and least_k[end - 1] <= k[p]:
                alive = False
                break
        if alive:
            survivors[kept_count] = p
            kept_count += 1
    return survivors[:kept_count]


# Orderings: numba's `np.argsort` and `np.argpartition` for a 1-D float64 array, step for step (median-of-three
# pivots, the same swaps, insertion sort below SMALL_SORT, NaN last), without the generic wrappers around
# them. From numba 0.68 (BSD-2-Clause): numba/misc/quicksort.py (`partition`, `insertion_sort`,
# `run_quicksort1`) and numba/np/arraymath.py (`_partition_factory(..., argpartition=True)`,
# `_select_factory`, `np_argpartition_impl_inner`); numba's copyright notice and license are in
# THIRD_PARTY_NOTICES.md at the repository's root.

SMALL_SORT = 15
"""A range low..high with high - low below this is insertion-sorted (numba's SMALL_QUICKSORT)."""
STACK = 100
"""Pending ranges of the sort (numba's MAX_STACK; the larger side waits and the smaller goes on, so at most
log2(n) wait)."""


@njit(cache=True)
def _before(a, b):
    """a sorts before b: a < b, with NaN after every number (numba's `lt_floats`, NumPy's order)."""
    return a < b or (b != b and a == a)


@njit(cache=True)
def _sort_partition(a, order, low, high):
    """Partition order[low:high + 1] by the values a[order] around a median-of-three pivot; its index."""
    mid = (low + high) >> 1
    if _before(a[order[mid]], a[order[low]]):
        order[low], order[mid] = order[mid], order[low]
    if _before(a[order[high]], a[order[mid]]):
        order[high], order[mid] = order[mid], order[high]
    if _before(a[order[mid]], a[order[low]]):
        order[low], order[mid] = order[mid], order[low]
    pivot = a[order[mid]]
    order[high], order[mid] = order[mid], order[high]  # the pivot waits at the end
    i, j = low, high - 1
    while True:
        while i < high and _before(a[order[i]], pivot):
            i += 1
        while j >= low and _before(pivot, a[order[j]]):
            j -= 1
        if i >= j:
            break
        order[i], order[j] = order[j], order[i]
        i += 1
        j -= 1
    order[i], order[high] = order[high], order[i]
    return i


@njit(cache=True)
def _insertion_sort(a, order, low, high):
    """Sort order[low:high + 1] by a[order] (inclusive bounds)."""
    for i in range(low + 1, high + 1):
        k = order[i]
        v = a[k]
        j = i
        while j > low and _before(v, a[order[j - 1]]):
            order[j] = order[j - 1]
            j -= 1
        order[j] = k


@njit(cache=True)
def _argsort(a):
    """[n] int64: numba's `np.argsort(a)` (quicksort) of a 1-D float64 array."""
    n = a.size
    order = np.empty(n, np.int64)
    for c in range(n):
        order[c] = c
    if n < 2:
        return order
    lows = np.empty(STACK, np.int64)
    highs = np.empty(STACK, np.int64)
    lows[0], highs[0] = 0, n - 1
    pending = 1
    while pending > 0:
        pending -= 1
        low, high = lows[pending], highs[pending]
        while high - low >= SMALL_SORT:
            i = _sort_partition(a, order, low, high)
            if high - i > i - low:  # the right side is larger: it waits, the left one goes on
                if high > i:
                    lows[pending], highs[pending] = i + 1, high
                    pending += 1
                high = i - 1
            else:
                if i > low:
                    lows[pending], highs[pending] = low, i - 1
                    pending += 1
                low = i + 1
        _insertion_sort(a, order, low, high)
    return order


@njit(cache=True)
def _least(a, count):
    """[count] int64: numba's `np.argpartition(a, count - 1)[:count]` of a 1-D float64 array, 0 < count <= n:
    the indices of `count` least values (quickselect of the (count - 1)-th)."""
    n = a.size
    order = np.empty(n, np.int64)
    for c in range(n):
        order[c] = c
    k, low, high = count - 1, np.int64(0), n - 1  # not the literal 0: `_sort_partition` would compile for it too
    i = _sort_partition(a, order, low, high)  # numba partitions a copy of the values; a[order] is that copy
    while i != k:
        if i < k:
            low = i + 1
        else:
            high = i - 1
        i = _sort_partition(a, order, low, high)
    return order[:count]


class PassTables(NamedTuple):
    """What one forward pass (`pareto_pass`) reads: m free decisions, O options, B buckets, J multipliers.

    Built by `paradyse_lab.solvers.dp_pass.pass_tables`; every array C-contiguous and writable (`writable`), so that the
    kernel has one compiled specialisation."""

    times: np.ndarray
    """[m, O] float64 seconds of each free decision's options (inf: not allowed)."""
    kept: np.ndarray
    """[m, O] int64 kept bytes (`BIG` where not allowed)."""
    bucket: np.ndarray
    """[m, O] int64 bucket of each option: the least cap in play at or above its effective transient."""
    switch: np.ndarray
    """[O, O] float64 switch costs, charged into step i when adjacent[i]; shape [0, 0]: no switch costs."""
    adjacent: np.ndarray
    """[m] bool: free decision i directly follows free decision i - 1 (never charged at i = 0)."""
    reach: np.ndarray
    """[O] float64: the most a state ending in any option saves on the next switch over one ending in o."""
    time_cap: np.ndarray
    """[m, O] float64: a state extended by option o at step i must be faster than this (the bound minus the
    least time of the rest)."""
    lam_cap: np.ndarray
    """[J, m, O] float64: the same test for each multiplier's Lagrangian bound (`_lagrange_slack`)."""
    rest_k: np.ndarray
    """[m] int64: least kept bytes of the decisions after step i."""
    budgets: np.ndarray
    """[B] int64 kept-bytes budget of each bucket, descending."""
    lams: np.ndarray
    """[J] float64 Lagrange multipliers."""
    t0: float
    """Time of the decisions taken out of the pass as constants (they start every state)."""
    k0: int
    """Their kept bytes."""
    b0: int
    """Their largest bucket."""
    grouped: bool
    """Whether states compete only within their bucket (several caps in play, or switch costs); else one
    group."""


@njit(cache=True)
def _lagrange_slack(t, k, room, lams, lam_cap, i, o):
    """max over multipliers j of t + lams[j] * (k - room) - lam_cap[j, i, o]: negative when no multiplier's
    Lagrangian bound on the completions of this partial plan reaches the bound."""
    worst = -np.inf
    for j in range(lams.size):
        worst = max(worst, t + lams[j] * (k - room) - lam_cap[j, i, o])
    return worst


@njit(cache=True)
def _extend(tb, i, ft, fk, fb, fo):
    """Phase 1 of step i: every admissible extension of the front (ft, fk, fb, fo) by an option of decision
    i, as candidate arrays (time, kept, bucket, option, parent state)."""
    # the fields as locals: read through `tb` inside the loop they cost ~25% of the pass
    times, kept, bucket, switch, budgets = tb.times, tb.kept, tb.bucket, tb.switch, tb.budgets
    time_cap, rest_k, lams, lam_cap = tb.time_cap, tb.rest_k, tb.lams, tb.lam_cap
    S, O = ft.size, times.shape[1]
    ct = np.empty(S * O)
    ck = np.empty(S * O, np.int64)
    cb = np.empty(S * O, np.int64)
    co = np.empty(S * O, np.int64)
    cp = np.empty(S * O, np.int64)
    n = 0
    charge = i > 0 and switch.shape[0] > 0 and tb.adjacent[i]
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
    return ct[:n], ck[:n], cb[:n], co[:n], cp[:n]


@njit(cache=True)
def _beam_cut(tb, i, ct, ck, cb, co, cp, beam):
    """Heuristic mode: the `beam` candidates of least Lagrangian slack (all of them when there are fewer)."""
    n = ct.size
    if beam <= 0 or n <= beam:
        return ct, ck, cb, co, cp
    score = np.empty(n)
    for c in range(n):
        score[c] = _lagrange_slack(ct[c], ck[c], tb.budgets[cb[c]], tb.lams, tb.lam_cap, i, co[c])
    return _take(_least(score, beam), ct, ck, cb, co, cp)  # numba's np.argpartition(score, beam - 1)[:beam]


@njit(cache=True)
def _take(chosen, ct, ck, cb, co, cp):
    """(ct[chosen], ck[chosen], cb[chosen], co[chosen], cp[chosen]) in one loop: candidates or states
    (time, kept, bucket, last option, parent) picked by index, in the order of `chosen`."""
    n = chosen.size
    t, k, b = np.empty(n), np.empty(n, np.int64), np.empty(n, np.int64)
    o, p = np.empty(n, np.int64), np.empty(n, np.int64)
    for j in range(n):
        c = chosen[j]
        t[j], k[j], b[j], o[j], p[j] = ct[c], ck[c], cb[c], co[c], cp[c]
    return t, k, b, o, p


@njit(cache=True)
def _undominated(tb, ct, ck, cb, co):
    """Phase 2 of a step: indices of the candidates not weakly dominated. In ascending time, a candidate
    stays when its kept bytes are below those of every earlier one kept in its group (same last option,
    with switch costs) or in a bucket below it (when grouped)."""
    n, grouped = ct.size, tb.grouped
    has_steps = tb.switch.shape[0] > 0
    width = tb.times.shape[1] if has_steps else 1  # groups: (bucket, last option) with switch costs, else bucket
    n_groups = tb.budgets.size * width if grouped else width
    runmin = np.empty(n_groups, np.int64)  # per group: least kept of the states kept so far
    for g in range(n_groups):
        runmin[g] = INT64_MAX
    order = _argsort(ct)  # numba's np.argsort(ct)
    keep = np.empty(n, np.int64)
    S = 0
    for j in range(n):
        c = order[j]
        last = co[c] if has_steps else 0
        below = INT64_MAX  # least kept of an earlier (faster) state in a bucket at or below
        for bb in range(cb[c] + 1 if grouped else 1):
            below = min(below, runmin[bb * width + last])
        if ck[c] < below:
            g = cb[c] * width + last if grouped else 0
            runmin[g] = min(runmin[g], ck[c])
            keep[S] = c
            S += 1
    return keep[:S]


@njit(cache=True)
def _backtrack(hist_opt, hist_par, start, j):
    """Phase 3: the plan [m] of state j of the last front, following the parents back through the history
    (step i's states are hist_*[start[i]:start[i + 1]])."""
    m = start.size - 1
    plan = np.empty(m, np.int64)
    for i in range(m - 1, -1, -1):
        plan[i] = hist_opt[start[i] + j]
        j = hist_par[start[i] + j]
    return plan


@njit(cache=True)
def pareto_pass(tb, beam):
    """The forward Pareto pass of `paradyse_lab.solvers.dp_pass.forward_pass` over the tables `tb` (`PassTables`, m free
    decisions): (found, plan [m]).

    A partial plan is a state (time, kept, bucket, last option); the first front is the constants extended
    by each option of decision 0. Step i extends every state by every option o (`_extend`): the candidate
    is admissible when time < time_cap[i, o], kept <= budgets[bucket] - rest_k[i] and, for every multiplier
    j, time + lams[j] * (kept - budgets[bucket]) < lam_cap[j, i, o]. The next front holds the admissible
    candidates that no other weakly dominates in (time, kept) among those with the same last option (when
    there are switch costs) and a bucket at or below theirs (when `grouped`; else one bucket): a lower
    bucket has the larger kept budget and puts every completion in a bucket no higher (`_undominated`).
    With switch costs, `keep_across_options` prunes across last options too. The fastest state of the last
    front gives the plan (`_backtrack`).

    beam > 0 makes it a heuristic: at each step only the `beam` admissible candidates of least Lagrangian
    bound are kept (`_beam_cut`). The plan it finds still meets every constraint (an upper bound for the
    exact pass); it may not be the best.
    """
    m, O = tb.times.shape
    ft, fk, fb, fo = np.empty(1), np.empty(1, np.int64), np.empty(1, np.int64), np.zeros(1, np.int64)
    ft[0], fk[0], fb[0] = tb.t0, tb.k0, tb.b0  # one state: the constants
    hist_opt = np.empty(max(1024, 4 * O), np.int64)
    hist_par = np.empty(hist_opt.size, np.int64)
    start = np.zeros(m + 1, np.int64)  # history of step i: hist_*[start[i]:start[i + 1]]
    for i in range(m):
        ct, ck, cb, co, cp = _extend(tb, i, ft, fk, fb, fo)
        if ct.size == 0:
            return False, np.empty(0, np.int64)
        if i == 0:  # the first front is every admissible option of decision 0 (at most O states), unfiltered
            ft, fk, fb, fo, fp = ct, ck, cb, co, cp
        else:
            ct, ck, cb, co, cp = _beam_cut(tb, i, ct, ck, cb, co, cp, beam)
            ft, fk, fb, fo, fp = _take(_undominated(tb, ct, ck, cb, co), ct, ck, cb, co, cp)
            if tb.switch.shape[0] > 0 and ft.size > O and i + 1 < m and tb.adjacent[i + 1]:
                survivors = keep_across_options(ft, fk, fb, fo, tb.reach, tb.budgets.size)
                ft, fk, fb, fo, fp = _take(survivors, ft, fk, fb, fo, fp)
        S = ft.size
        if start[i] + S > hist_opt.size:
            grown = max(2 * hist_opt.size, start[i] + S)
            hist_opt, hist_par = _grown(hist_opt, grown), _grown(hist_par, grown)
        for s in range(S):
            hist_opt[start[i] + s], hist_par[start[i] + s] = fo[s], fp[s]
        start[i + 1] = start[i] + S
    if ft.size == 0:
        return False, np.empty(0, np.int64)
    fastest = 0  # np.argmin(ft) as numba computes it: the first NaN, else the first least time
    for s in range(ft.size):
        if ft[s] != ft[s]:
            fastest = s
            break
        if ft[s] < ft[fastest]:
            fastest = s
    return True, _backtrack(hist_opt, hist_par, start, fastest)


@njit(cache=True)
def _grown(a, size):
    """[size] int64: a copy of `a` followed by unset entries."""
    out = np.empty(size, np.int64)
    for j in range(a.size):
        out[j] = a[j]
    return out


def writable(a, dtype) -> np.ndarray:
    """`a` as a C-contiguous, writable array of `dtype` (copied only when it is not one already).

    Every argument array goes through this, so each kernel sees one type per argument and compiles (or
    loads from the cache) one specialisation, the one `warm_up` makes: numba types a read-only array (as
    `SearchProblem` keeps its tables) apart from a writable one and would compile again on first use."""
    return np.require(a, dtype, ("C", "W"))


_warm = False


@contextlib.contextmanager
def _compile_lock():
    """An exclusive lock on a file in numba's cache folder beside this file (solvers/__pycache__), held while
    compiling: processes started together (pytest-xdist workers, a run's ranks) compile the kernels once
    (~20 s of CPU on a fresh install) and the others wait, then load the cache. Without fcntl (Windows) or a
    writable folder, no lock: each process compiles or loads on its own, as numba does."""
    try:
        import fcntl  # POSIX only: on Windows the ImportError below means no lock

        folder = Path(__file__).resolve().parent / "__pycache__"
        folder.mkdir(exist_ok=True)
        handle = open(folder / "kernels.compile.lock", "a")  # noqa: SIM115 - closed below
    except (ImportError, OSError):
        yield
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        handle.close()  # releases the lock


def warm_up() -> None:
    """Compile (or load from the cache) every kernel of this file and the bound kernels on a tiny
    problem, so no timed call pays for it; once per process, one process at a time (`_compile_lock`)."""
    global _warm
    if _warm:
        return
    with _compile_lock():
        _call_every_kernel()
    _warm = True


def _call_every_kernel() -> None:
    times = np.array([[1.0, 2.0], [1.5, 1.0]])
    kept = np.array([[5, 1], [4, 2]], dtype=np.int64)
    steps = np.zeros((1, 2, 2))
    lagrangian_dual(times, kept, 6, 4)
    viterbi_to_go(times, steps)
    viterbi_to_come(times, steps)
    capped_viterbi_totals(times, kept, kept, np.array([5], np.int64), np.array([0.5]), steps[0])
    zeros = np.zeros((2, 2), dtype=np.int64)
    for sw in (np.zeros((0, 0)), np.zeros((2, 2))):
        tables = PassTables(times=times, kept=kept, bucket=zeros, switch=sw, adjacent=np.array([False, True]),
                            reach=np.zeros(2), time_cap=np.full((2, 2), 9.0), lam_cap=np.full((1, 2, 2), 9.0),
                            rest_k=np.zeros(2, np.int64), budgets=np.array([9], np.int64), lams=np.zeros(1),
                            t0=0.0, k0=0, b0=0, grouped=True)
        pareto_pass(tables, 0)
    keep_across_options(np.array([1.0, 2.0]), np.array([2, 1], np.int64), np.zeros(2, np.int64),
                        np.zeros(2, np.int64), np.zeros(2), 1)
