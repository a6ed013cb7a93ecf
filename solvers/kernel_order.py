"""Index orderings for the compiled kernels (`solvers.kernels`): numba's own `np.argsort` and
`np.argpartition` algorithms for a 1-D float64 array, without the generic wrappers around them.

Why: numba compiles `np.argpartition` with its argument checks (`valid_kths`: `np.unique`, `np.any`,
`np.ndenumerate`) and an `np.ndindex` loop, and `np.argsort` with a list of named tuples as its stack; on a
fresh install those cost ~10 s of the kernels' compile. These functions run the same steps on the same
data (median-of-three pivots, the same swaps, insertion sort under 16 elements, NaN last), so they return
exactly the indices, in the same order, ties included, that numba's `np.argsort(a)` and
`np.argpartition(a, kth)[:kth + 1]` return. Algorithms from numba 0.68 (BSD-2-Clause): `numba/misc/quicksort.py`
(`make_quicksort_impl`: `partition`, `insertion_sort`, `run_quicksort1`) and `numba/np/arraymath.py`
(`_partition_factory` with `argpartition=True`, `_select_factory`, `np_argpartition_impl_inner`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

SMALL_SORT = 15
"""A range low..high with high - low below this is insertion-sorted (numba's SMALL_QUICKSORT)."""
STACK = 100
"""Pending ranges of the sort (numba's MAX_STACK; the smaller side is pushed, so at most log2(n) are)."""


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
def argsort(a):
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
def _select_partition(vals, order, low, high):
    """Partition vals[low:high + 1] in place around a median-of-three pivot, moving `order` along; its index."""
    mid = (low + high) >> 1
    if _before(vals[mid], vals[low]):
        vals[low], vals[mid] = vals[mid], vals[low]
        order[low], order[mid] = order[mid], order[low]
    if _before(vals[high], vals[mid]):
        vals[high], vals[mid] = vals[mid], vals[high]
        order[high], order[mid] = order[mid], order[high]
    if _before(vals[mid], vals[low]):
        vals[low], vals[mid] = vals[mid], vals[low]
        order[low], order[mid] = order[mid], order[low]
    pivot = vals[mid]
    vals[high], vals[mid] = vals[mid], vals[high]  # the pivot waits at the end
    order[high], order[mid] = order[mid], order[high]
    i, j = low, high - 1
    while True:
        while i < high and _before(vals[i], pivot):
            i += 1
        while j >= low and _before(pivot, vals[j]):
            j -= 1
        if i >= j:
            break
        vals[i], vals[j] = vals[j], vals[i]
        order[i], order[j] = order[j], order[i]
        i += 1
        j -= 1
    vals[i], vals[high] = vals[high], vals[i]
    order[i], order[high] = order[high], order[i]
    return i


@njit(cache=True)
def least(a, count):
    """[count] int64: numba's `np.argpartition(a, count - 1)[:count]` of a 1-D float64 array, 0 < count <= n:
    the indices of `count` least values (quickselect of the (count - 1)-th)."""
    n = a.size
    vals = np.empty(n)
    order = np.empty(n, np.int64)
    for c in range(n):
        vals[c] = a[c]
        order[c] = c
    k, low, high = count - 1, 0, n - 1
    i = _select_partition(vals, order, low, high)
    while i != k:
        if i < k:
            low = i + 1
        else:
            high = i - 1
        i = _select_partition(vals, order, low, high)
    return order[:count]
