"""The replay model's per-call costs fitted to measured step times: the host's seconds per operation issued
(`dispatch_s`), the runtime's Python per sub-layer in operations' worth (`sublayer_ops`) and what a collective call
or exchange costs beyond its alpha-beta time (`collective_s`: set-up, the ranks meeting, the launch of a
communication kernel). No kernel table holds them; on a machine whose tables are derived from specifications
(the bundled A100 ones) they are the only numbers fitted to its measurements.

`CallCostGrid` prices every step at every (sublayer_ops, dispatch_s, collective_s) of a grid (`SETTINGS`) in one
pass over its operations (`critical_path_many`: `price.critical_path` for all settings at once, on a GPU's
clocks), and `fit_call_costs` picks the setting with the lowest MAPE over the steps it is asked to fit on, then
refines the two costs between grid points (the critical path is piecewise linear in both). Which steps enter the
fit is the caller's: leaving one shape out fits on the other shapes' steps only.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from paradyse_lab.costmodel.replay.ops import Op
from paradyse_lab.costmodel.replay.price import DEVICE_KINDS, Prices

PASS = Op("host", "sublayer-python")
"""One sub-layer's Python: `sublayer_ops` operations' worth of host time (a marker the caller puts before each
sub-layer's operations)."""
PASS_OPS = (0, 32, 64, 128)
DISPATCH = tuple(float(x) for x in np.geomspace(1e-6, 2e-4, 18))
COLLECTIVE = (0.0,) + tuple(float(x) for x in np.geomspace(2e-6, 4e-3, 15))


@dataclass(frozen=True)
class CallCosts:
    """Fitted per-call costs (module docstring)."""

    sublayer_ops: int
    dispatch_s: float
    collective_s: float


def settings() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sublayer_ops, dispatch_s, collective_s) of every grid setting, flattened in that nesting order."""
    k, d, a = np.meshgrid(PASS_OPS, DISPATCH, COLLECTIVE, indexing="ij")
    return k.ravel().astype(float), d.ravel(), a.ravel()


def critical_path_many(ops, device_s, k: np.ndarray, d: np.ndarray, a: np.ndarray) -> np.ndarray:
    """`price.critical_path(ops).time_s` (alpha-beta communication, a GPU's overlapping host and device) at every
    setting (arrays `k`, `d`, `a` of one length): `PASS` costs the host k x d, every other operation d, and a
    collective over more than one rank or an exchange that moves anything `a` more. Between two exchanges, waits
    or host reads of a device value, a run of kernels and host operations is closed in form: the device ends at
    the latest of its start plus the run's kernels and, for each kernel j, the host's time issuing it plus the
    kernels from j on."""
    host, dev, free = np.zeros_like(d), np.zeros_like(d), np.zeros_like(d)
    arrive: dict[int, np.ndarray] = {}
    run: list[tuple] = []  # (host operations, PASS markers, seconds, a collective's, starts on the device stream)

    def flush(host, dev):
        if not run:
            return host, dev
        units = np.array([(x[0], x[1]) for x in run]).cumsum(axis=0)  # [N, 2] issued by the end of each op
        t = np.array([x[2] for x in run])
        coll = np.array([x[3] for x in run], float)
        is_dev = np.array([x[4] for x in run], bool)
        t, coll = np.where(is_dev, t, 0.0), np.where(is_dev, coll, 0.0)
        suffix_t, suffix_c = t[::-1].cumsum()[::-1], coll[::-1].cumsum()[::-1]
        issued = host[None, :] + (units[:, :1] + units[:, 1:] * k[None, :]) * d[None, :]  # [N, K]
        tail = suffix_t[:, None] + suffix_c[:, None] * a[None, :]
        starts = np.where(is_dev[:, None], issued + tail, -np.inf)
        dev = np.maximum(dev + tail[0], starts.max(axis=0)) if is_dev.any() else dev
        host = issued[-1]
        run.clear()
        return host, dev

    for op, t in zip(ops, device_s):
        kind = op.kind
        if op is PASS or (kind == "host" and op.name == PASS.name):
            run.append((0.0, 1.0, 0.0, False, False))
        elif kind in DEVICE_KINDS:
            run.append((1.0, 0.0, t, False, True))
        elif kind == "collective":
            run.append((1.0, 0.0, t, op.group > 1, True))  # a call over more than one rank pays its set-up
        elif kind in ("p2p", "wait") or op.name.startswith("_local_scalar"):
            host, dev = flush(host, dev)
            host = host + d
            if kind == "p2p":
                free = np.maximum(np.maximum(free, dev), host) + t + (a if op.nbytes and op.group > 1 else 0.0)
                arrive[op.ref] = free
            elif kind == "wait":
                dev = np.maximum(dev, arrive.get(op.ref, 0.0))
            else:
                host = np.maximum(host, dev)
        else:
            run.append((1.0, 0.0, 0.0, False, False))
    host, dev = flush(host, dev)
    return np.maximum(host, dev)


class CallCostGrid:
    """Step times of many steps at every grid setting (`settings()`): [steps, settings]."""

    def __init__(self, prices: Prices):
        if prices.serial or prices.comm != "alpha-beta":
            raise ValueError("per-call costs are fitted on a GPU's overlapping clocks with alpha-beta communication")
        self.prices = prices
        self.k, self.d, self.a = settings()
        self.rows: list[np.ndarray] = []

    def add(self, layer_ops, layers: int, extra_s: float = 0.0) -> None:
        """Price one step of `layers` identical layers issuing `layer_ops` each (stack.stack_time's steady
        state), plus `extra_s` seconds the layers do not price (the embedding and head)."""
        ops = list(layer_ops)
        device_s = [self.prices.device_s(op) for op in ops]
        one = critical_path_many(ops, device_s, self.k, self.d, self.a)
        if layers > 1:
            two = critical_path_many(ops * 2, device_s * 2, self.k, self.d, self.a)
            one = one + (layers - 1) * (two - one)
        self.rows.append(one + extra_s)

    def table(self, index=None) -> np.ndarray:
        table = np.array(self.rows)
        return table if index is None else table[index]

    def times(self, costs: CallCosts, index=None) -> np.ndarray:
        """Every step's time (or those of `index`) at `costs`, interpolated linearly between grid points."""
        return _at(self.table(index), costs)


def _bracket(grid: tuple[float, ...], x: float) -> tuple[int, float]:
    """The grid interval holding `x` (the first or last beyond the grid) and x's place in it, clamped to [0, 1].
    `bisect_left` is numpy's `searchsorted` on the sorted grid, without converting the grid to an array on every
    call of the fit's loss."""
    i = min(max(bisect.bisect_left(grid, x) - 1, 0), len(grid) - 2)
    return i, min(max((x - grid[i]) / (grid[i + 1] - grid[i]), 0.0), 1.0)


def _at(table: np.ndarray, costs: CallCosts) -> np.ndarray:
    cube = table.reshape(len(table), len(PASS_OPS), len(DISPATCH), len(COLLECTIVE))
    cube = cube[:, PASS_OPS.index(costs.sublayer_ops)]
    i, u = _bracket(DISPATCH, costs.dispatch_s)
    j, v = _bracket(COLLECTIVE, costs.collective_s)
    return ((1 - u) * (1 - v) * cube[:, i, j] + u * (1 - v) * cube[:, i + 1, j] + (1 - u) * v * cube[:, i, j + 1]
            + u * v * cube[:, i + 1, j + 1])


def _golden(loss, lo: float, hi: float, steps: int = 30) -> float:
    g = (math.sqrt(5) - 1) / 2
    for _ in range(steps):
        x, y = hi - g * (hi - lo), lo + g * (hi - lo)
        if loss(x) < loss(y):
            hi = y
        else:
            lo = x
    return (lo + hi) / 2


def _neighbours(grid: tuple[float, ...], x: float) -> tuple[float, float]:
    """The grid points either side of the grid point nearest `x`."""
    i = min(range(len(grid)), key=lambda j: abs(grid[j] - x))
    return grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]


def fit_call_costs(grid: CallCostGrid, measured, index=None) -> CallCosts:
    """The per-call costs minimising the MAPE of `grid`'s steps (those of `index`) against `measured` seconds: for
    each `PASS_OPS`, the best grid setting, then two rounds of golden-section search on each cost between its
    neighbours; the best of those."""
    measured = np.asarray(measured, float)
    table = grid.table(index)
    err = (np.abs(table - measured[:, None]) / measured[:, None]).mean(axis=0)

    def loss(c: CallCosts) -> float:
        return float(np.mean(np.abs(_at(table, c) - measured) / measured))

    fits = []
    for k in PASS_OPS:
        best = int(np.argmin(np.where(grid.k == k, err, np.inf)))
        costs = CallCosts(k, float(grid.d[best]), float(grid.a[best]))
        for _ in range(2):
            a = costs.collective_s
            d = _golden(lambda x, k=k, a=a: loss(CallCosts(k, x, a)), *_neighbours(DISPATCH, costs.dispatch_s))
            a = _golden(lambda x, k=k, d=d: loss(CallCosts(k, d, x)), *_neighbours(COLLECTIVE, a))
            costs = CallCosts(k, d, a)
        fits.append((loss(costs), costs))
    return min(fits, key=lambda f: f[0])[1]
