"""A layer stack's step priced from its traced layer, and the per-operation dispatch cost fitted to step times.

`stack_time(layer_ops, layers, prices)`: the stack issues the layer's operations `layers` times, one after another;
its critical path is that of one layer plus (layers - 1) times the increment a second layer adds (host,
device and communication clocks carry across layers, and every layer after the first meets them alike).

The dispatch cost is the one price no kernel table holds: the host's seconds per operation (the Python of the
runtime's autograd functions and PyTorch's dispatcher between kernels). `DispatchGrid` prices each step at
`GRID` dispatch costs once (the critical path is piecewise linear in it, so between grid points it is
interpolated linearly), and `fit_dispatch` picks the cost that minimises the MAPE over measured step times:
one number per machine (host CPU and software), fitted on the steps it is asked to fit on.
"""

from __future__ import annotations

import math

import numpy as np

from paradyse_lab.costmodel.replay.price import Prices, clock_steps, walk

GRID = np.geomspace(2e-6, 2e-4, 16)
"""Dispatch costs (seconds per operation) each step is priced at."""


def stack_time(layer_ops, layers: int, prices: Prices, device_s=None) -> float:
    """Seconds of a step of `layers` identical layers issuing `layer_ops` each (module docstring)."""
    return _stacked(clock_steps(layer_ops, prices, device_s), layers, prices.dispatch_s, prices.serial)


def _stacked(steps: list[tuple], layers: int, d: float, serial: bool) -> float:
    """`stack_time` of a layer's `steps` (`price.clock_steps`) at dispatch cost `d`: one layer's critical path,
    plus (layers - 1) times the increment of a second."""
    n = len(steps)
    if layers == 1:
        return walk(steps, d, serial, (n,))[0].time_s
    one, two = (x.time_s for x in walk(steps * 2, d, serial, (n, 2 * n)))
    return one + (layers - 1) * (two - one)


class DispatchGrid:
    """Step times of many steps at every `GRID` dispatch cost: [steps, len(GRID)]."""

    def __init__(self, prices: Prices):
        self.prices = prices
        self.rows: list[np.ndarray] = []

    def add(self, layer_ops, layers: int) -> None:
        """Price one step (its layer's operations, its layer count) at every grid point: `stack_time` at each
        dispatch cost, the operations classified and priced once for all of them (`price.clock_steps`)."""
        steps = clock_steps(layer_ops, self.prices)
        self.rows.append(np.array([_stacked(steps, layers, float(d), self.prices.serial) for d in GRID]))

    def times(self, dispatch_s: float, index=None) -> np.ndarray:
        """Every step's time (or those of `index`) at `dispatch_s`, interpolated between grid points."""
        table = np.array(self.rows) if index is None else np.array(self.rows)[index]
        x = math.log(dispatch_s)
        xs = np.log(GRID)
        i = int(np.clip(np.searchsorted(xs, x) - 1, 0, len(GRID) - 2))
        w = (x - xs[i]) / (xs[i + 1] - xs[i])
        return table[:, i] * (1 - w) + table[:, i + 1] * w


def fit_dispatch(grid: DispatchGrid, measured, index=None) -> float:
    """The dispatch cost minimising the MAPE of `grid`'s steps (those of `index`) against `measured` seconds:
    a scan of the grid, then golden-section search around its best point."""
    measured = np.asarray(measured, float)

    def loss(log_d: float) -> float:
        return float(np.mean(np.abs(grid.times(math.exp(log_d), index) - measured) / measured))

    xs = np.log(GRID)
    best = int(np.argmin([loss(x) for x in xs]))
    lo, hi = xs[max(best - 1, 0)], xs[min(best + 1, len(xs) - 1)]
    g = (math.sqrt(5) - 1) / 2
    for _ in range(40):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if loss(a) < loss(b):
            hi = b
        else:
            lo = a
    return math.exp((lo + hi) / 2)
