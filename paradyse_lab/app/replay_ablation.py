"""The replay cost model's accuracy on a profile, in the shape `paradyse-lab costmodel ablate` reports the others.

Each profile row's step is the runtime's own trace of its layer, priced on the cluster's bundled kernel tables
(paradyse_lab/data/kernels) on the critical path of the host, device and communication clocks
(paradyse_lab/costmodel/replay). What is fitted are the per-call costs no table holds: the per-operation dispatch
cost and the runtime's Python per sub-layer, and on a profile of real runs (the authors' A100 steps) also a
collective call's cost beyond its alpha-beta time (`call_costs`): on the ablation's training rows
for the interpolation and extrapolation scores, and on every other shape's rows for each shape left out (the held-out
shape's rows never enter its fit). Memory is the analytic model's (the replay model prices time only). A rank-local
profile's rows are measured compute (the fake group's local copies in place of collectives) plus the analytic model's
exposed communication: they are predicted the same way (the trace priced with local copies, plus that communication),
so the score is the replay model's prediction of what was measured.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from paradyse_lab.app.replay_traces import SublayerTraces
from paradyse_lab.cluster.spec import ClusterSpec
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.ablation import metrics_by_target, split_profiles
from paradyse_lab.costmodel.calibration import LENGTH_BANDS, SHAPE_COLUMNS, band_of, mape
from paradyse_lab.costmodel.learned_fit import analytic_whole, profile_cluster, row_cost_models
from paradyse_lab.costmodel.replay.call_costs import PASS, CallCostGrid, CallCosts, fit_call_costs
from paradyse_lab.costmodel.replay.price import Prices
from paradyse_lab.costmodel.replay.stack import DispatchGrid, fit_dispatch
from paradyse_lab.costmodel.replay.tables import bundled_tables
from paradyse_lab.errors import UserInputError

NAME = "replay"
PASS_OPS = (0, 32, 64, 128)
"""Candidates for the runtime's Python per sub-layer (its autograd function, context and strategy code, outside
any operator), in units of one operation's dispatch: fitted with the dispatch cost, on the same rows."""


def row_grids(df: pd.DataFrame, cluster: ClusterSpec, pass_ops=PASS_OPS) -> dict[int, tuple[DispatchGrid, dict]]:
    """Per `pass_ops` value k: every row's step time at each grid dispatch cost, with k operations' worth of host
    time before each sub-layer's trace, and what tracing and pricing took (every row traced once for all k)."""
    tables = _tables(cluster)
    local = set(df["source"]) == {"measured-rank-local"}
    prices = Prices(tables, cluster, 0.0, comm="local-copy" if local else "alpha-beta")
    grids = {k: DispatchGrid(prices) for k in pass_ops}
    started = time.perf_counter()
    traces: dict = {}
    for attention, mlp, layers, extra in _row_steps(df, cluster, traces, local):
        for k, grid in grids.items():
            before = [PASS] * k
            grid.add(before + attention + before + mlp, layers)
            grid.rows[-1] = grid.rows[-1] + extra
    info = _info(traces, started, tables)
    return {k: (grid, info) for k, grid in grids.items()}


def call_cost_grid(df: pd.DataFrame, cluster: ClusterSpec) -> tuple[CallCostGrid, dict]:
    """Every row's step time at each grid setting of the per-call costs (call_costs.settings), and what tracing
    and pricing took."""
    tables = _tables(cluster)
    grid = CallCostGrid(Prices(tables, cluster, 0.0))
    started = time.perf_counter()
    traces: dict = {}
    for attention, mlp, layers, extra in _row_steps(df, cluster, traces, False):
        grid.add([PASS] + attention + [PASS] + mlp, layers, extra)
    return grid, _info(traces, started, tables)


def _tables(cluster: ClusterSpec):
    tables = bundled_tables(cluster.name)
    if tables is None:
        raise UserInputError(f"cost model {NAME!r}: no kernel tables for cluster {cluster.name!r} "
                             "(bundled: paradyse_lab/data/kernels)")
    return tables


def _row_steps(df: pd.DataFrame, cluster: ClusterSpec, traces: dict, local: bool):
    """Per row: (one layer's attention operations, its MLP operations, the layer count, the seconds the layers do
    not price: the embedding and head, and for a rank-local row the analytic model's exposed communication)."""
    for r, cm in row_cost_models(df, cluster):
        key = (cm.model, int(r.p))
        if key not in traces:
            traces[key] = SublayerTraces(cm.model, int(r.p))
        tr = traces[key]
        option = StrategyOption(r.strategy, bool(r.recompute))
        attention = tr.trace("attention", option, int(r.seq_len), int(r.batch))
        mlp = tr.trace("mlp", option, int(r.seq_len), int(r.batch))
        extra = cm.fixed(int(r.seq_len), int(r.batch)).time_s
        if local:  # the row's time is its measured compute plus the analytic model's exposed communication
            extra += int(r.layers) * sum(cm.sublayer(kind, option, int(r.seq_len), int(r.batch)).exposed_comm_s
                                         for kind in ("attention", "mlp"))
        yield list(attention), list(mlp), int(r.layers), extra


def _info(traces: dict, started: float, tables) -> dict:
    return {"trace_s": sum(t.trace_s for t in traces.values()), "traced": sum(t.traced for t in traces.values()),
            "wall_s": time.perf_counter() - started, "tables": tables.source}


class _DispatchFit:
    """The dispatch cost and the Python per sub-layer (`PASS_OPS`) fitted on rank-local rows (no collectives)."""

    def __init__(self, df: pd.DataFrame, cluster: ClusterSpec):
        self.grids = row_grids(df, cluster, PASS_OPS)
        self.info = self.grids[0][1]

    def fit(self, measured: np.ndarray, index: np.ndarray) -> CallCosts:
        best = None
        for k, (grid, _) in self.grids.items():
            d = fit_dispatch(grid, measured, index)
            err = mape(grid.times(d, index), measured)
            if best is None or err < best[0]:
                best = (err, k, d)
        return CallCosts(best[1], best[2], 0.0)

    def times(self, costs: CallCosts, index: np.ndarray) -> np.ndarray:
        return self.grids[costs.sublayer_ops][0].times(costs.dispatch_s, index)


class _CallCostFit:
    """The dispatch cost, the Python per sub-layer and a collective call's cost beyond its alpha-beta time, fitted
    on rows of real runs (call_costs)."""

    def __init__(self, df: pd.DataFrame, cluster: ClusterSpec):
        self.grid, self.info = call_cost_grid(df, cluster)

    def fit(self, measured: np.ndarray, index: np.ndarray) -> CallCosts:
        return fit_call_costs(self.grid, measured, index)

    def times(self, costs: CallCosts, index: np.ndarray) -> np.ndarray:
        return self.grid.times(costs, index)


def _index(df: pd.DataFrame, part: pd.DataFrame) -> np.ndarray:
    """Positions in `df` of the rows of `part` (matched on what identifies a row)."""
    cols = ["model", "h", "heads", "kv_heads", "layers", "p", "strategy", "recompute", "seq_len", "batch"]
    where = {tuple(r): i for i, r in enumerate(df[cols].itertuples(index=False))}
    return np.array([where[tuple(r)] for r in part[cols].itertuples(index=False)], int)


def replay_accuracy(df: pd.DataFrame, cluster: ClusterSpec | None, holdout_every: int = 4) -> dict:
    """The replay model's summary (the four MAPEs, by band), per-strategy rows and leave-one-shape-out summary,
    in the formats of `costmodel.ablation.accuracy` and `calibration.loso_summary`. A rank-local profile fits the
    dispatch cost and the Python per sub-layer; a profile of real runs also a collective call's cost."""
    cl = profile_cluster(df, cluster)
    df = df.reset_index(drop=True)
    local = set(df["source"]) == {"measured-rank-local"}
    fitter = _DispatchFit(df, cl) if local else _CallCostFit(df, cl)
    train, interp, extrap = split_profiles(df, holdout_every)
    tests = {"interp": interp, "extrap": extrap}
    costs = fitter.fit(train["time_s"].to_numpy(float), _index(df, train))
    pred = {k: (fitter.times(costs, _index(df, t)), analytic_whole(t, cl)[1]) for k, t in tests.items()}
    summary = metrics_by_target(pred, tests, None)
    both = pd.concat([interp, extrap], ignore_index=True)
    bands = np.array(band_of(both["seq_len"].to_numpy()))
    pt = np.concatenate([pred["interp"][0], pred["extrap"][0]])
    summary["time_mape_by_band"] = {b: mape(pt[bands == b], both["time_s"].to_numpy()[bands == b])
                                    for b, _, _ in LENGTH_BANDS if (bands == b).any()}
    summary["call_costs"] = costs
    per_strategy = [{"model": NAME, "strategy": s, **metrics_by_target(pred, tests, s)}
                    for s in sorted(set(interp["strategy"]) | set(extrap["strategy"]))]
    every = fitter.fit(df["time_s"].to_numpy(float), np.arange(len(df)))  # what a bundled dispatch.toml holds
    return {"summary": summary, "by_strategy": per_strategy, "loso": _loso(df, fitter),
            "info": {**fitter.info, "every_row": every}}


def _loso(df: pd.DataFrame, fitter) -> dict | None:
    """Leave one shape out: the per-call costs fitted on the other shapes' rows only, the held-out shape's rows
    predicted with them (calibration.loso_summary's form)."""
    shapes = df[list(SHAPE_COLUMNS)].drop_duplicates()
    if len(shapes) < 2:
        return None
    t = df["time_s"].to_numpy(float)
    pred = np.empty(len(df))
    shape_of = np.empty(len(df), object)
    fitted = {}
    for shape in shapes.itertuples(index=False):
        held = np.ones(len(df), bool)
        for col, v in zip(SHAPE_COLUMNS, shape):
            held &= (df[col] == v).to_numpy()
        costs = fitter.fit(t[~held], np.flatnonzero(~held))
        pred[held] = fitter.times(costs, np.flatnonzero(held))
        label = "/".join(str(x) for x in shape)
        shape_of[held] = label
        fitted[label] = costs
    points = pd.DataFrame({"shape": shape_of, "strategy": df["strategy"], "band": band_of(df["seq_len"].to_numpy()),
                           "time_s": t, NAME: pred})
    per_shape = {s: mape(g[NAME], g["time_s"]) for s, g in points.groupby("shape", sort=False)}
    by_strategy = {s: float(np.mean([mape(x[NAME], x["time_s"]) for _, x in g.groupby("shape")]))
                   for s, g in points.groupby("strategy", sort=True)}
    by_band = {b: mape(g[NAME], g["time_s"]) for b, g in points.groupby("band", sort=False)}
    by_strategy_band = {f"{s} {b}": mape(g[NAME], g["time_s"]) for (s, b), g in points.groupby(["strategy", "band"])}
    return {"time_mape_leave_one_shape_out": float(np.mean(list(per_shape.values()))), "by_strategy": by_strategy,
            "by_band": by_band, "by_shape": per_shape, "by_strategy_band": by_strategy_band, "call_costs": fitted}
