"""Calibration: fit the analytic model's four physical parameters per strategy to a profile's times.

For one strategy, each profile row (a uniform plan of that strategy over the model's L layers) is modelled
as (`StrategyCalibration`, cluster_spec.py)

    t = compute_scale * C + comm_scale * E + layer_overhead_s * L + width_overhead_s * L * h + H

with C, E the uncalibrated analytic compute and exposed-communication seconds summed over the L layers,
h the hidden size and H the (uncalibrated) embedding/head time. The model is linear in
the parameters, so the fit is non-negative least squares on relative error: minimise
sum_i ((t_i_model - t_i) / t_i)^2 subject to every parameter >= 0 (scipy.optimize.nnls on rows scaled by
1 / t_i), deterministic and with no starting point.

What the data can pin down: compute_scale from the length-squared growth, comm_scale from the
communication that grows with the length (activations, K/V) and, for the ZeRO-3 strategies, with the
weights; layer_overhead_s and width_overhead_s from the time left at short lengths, told apart only across
shapes of different h (fitted on one shape they are one constant); `leave_one_shape_out` shows how well
what is fitted on some shapes carries to another.

Commands: `paradyse-lab costmodel fit-calibration --profiles FILE --out CLUSTER.toml` (then `--cluster CLUSTER.toml`
anywhere), and `paradyse-lab costmodel ablate --profiles FILE` (accuracy, per length band, leave-one-shape-out).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd

from paradyse_lab.cluster.spec import CALIBRATION_PARAMETERS, ClusterSpec, StrategyCalibration
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.learned_fit import row_cost_models
from paradyse_lab.errors import UserInputError

LENGTH_BANDS = (("<=8K", 0, 8 * 1024), ("8K-64K", 8 * 1024, 64 * 1024), (">64K", 64 * 1024, float("inf")))
"""(label, lower bound exclusive, upper bound inclusive) of the length bands accuracy is reported in."""
SHAPE_COLUMNS = ("h", "heads", "kv_heads", "layers", "p")


def uncalibrated(cluster: ClusterSpec) -> ClusterSpec:
    """The cluster without its calibration."""
    return dataclasses.replace(cluster, calibration={}) if cluster.calibration else cluster


def row_features(df: pd.DataFrame, cluster: ClusterSpec) -> tuple[np.ndarray, np.ndarray]:
    """Per profile row: the [n, 4] features (C, E, L, L h of the module docstring) and the [n] offset H."""
    X, offset = np.zeros((len(df), len(CALIBRATION_PARAMETERS))), np.zeros(len(df))
    for i, (r, cm) in enumerate(row_cost_models(df, uncalibrated(cluster))):
        opt = StrategyOption(r.strategy, bool(r.recompute))
        parts = [cm.sublayer(kind, opt, int(r.seq_len), int(r.batch)) for kind in ("attention", "mlp")]
        L = int(r.layers)
        X[i] = (L * sum(c.compute_s for c in parts), L * sum(c.exposed_comm_s for c in parts), L, L * int(r.h))
        offset[i] = cm.fixed(int(r.seq_len), int(r.batch)).time_s
    return X, offset


def fit_strategy(X: np.ndarray, offset: np.ndarray, t: np.ndarray) -> StrategyCalibration:
    """Non-negative least squares on relative error (module docstring) for one strategy's rows."""
    from scipy.optimize import nnls  # scipy: ~0.5 s to import, only when a fit runs

    if len(t) == 0:
        raise UserInputError("calibration: no rows to fit")
    scale = np.abs(X).max(axis=0)
    scale[scale == 0] = 1.0  # a feature that is zero everywhere cannot be fitted: its parameter stays 0
    A = X / t[:, None] / scale  # relative residuals, columns scaled for conditioning
    b = (t - offset) / t
    theta, _ = nnls(A, b)
    theta = theta / scale
    return StrategyCalibration(**dict(zip(CALIBRATION_PARAMETERS, (float(x) for x in theta))))


def fit_calibration(df: pd.DataFrame, cluster: ClusterSpec,
                    features: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, StrategyCalibration]:
    """{strategy: StrategyCalibration} fitted on every row of a validated profile (all shapes pooled)."""
    X, offset = features if features is not None else row_features(df, cluster)
    t = df["time_s"].to_numpy(dtype=float)
    out = {}
    for strategy in sorted(set(df["strategy"])):
        mask = (df["strategy"] == strategy).to_numpy()
        out[strategy] = fit_strategy(X[mask], offset[mask], t[mask])
    return out


def calibrated_cluster(cluster: ClusterSpec, calibration: dict, name: str | None = None,
                       source: str = "") -> ClusterSpec:
    """`cluster` with `calibration` (and, optionally, another name and source)."""
    return dataclasses.replace(cluster, calibration=dict(calibration), name=name or cluster.name,
                               source=source or cluster.source)


def predict(calibration: dict, X: np.ndarray, offset: np.ndarray, strategies: np.ndarray) -> np.ndarray:
    """Calibrated whole-model times of rows from their features (`row_features`)."""
    out = np.empty(len(X))
    for i, strategy in enumerate(strategies):
        c = calibration.get(strategy, StrategyCalibration())
        theta = np.array([getattr(c, k) for k in CALIBRATION_PARAMETERS])
        out[i] = X[i] @ theta + offset[i]
    return out


def analytic_times(X: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """Uncalibrated analytic whole-model times from the features (identity parameters)."""
    return X[:, 0] + X[:, 1] + offset


def shape_label(row) -> str:
    """How a shape is named in results: `model (h H, N heads, L layers, p P)`."""
    return f"{row['model']} (h {row['h']}, {row['heads']} heads, {row['layers']} layers, p {row['p']})"


def leave_one_shape_out(df: pd.DataFrame, cluster: ClusterSpec,
                        features: tuple[np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
    """Fit on all shapes but one, predict the one left out, for each shape in turn (`features`: the rows'
    `row_features`, when the caller has them already).

    Returns one row per profile row: shape, strategy, seq_len, band, time_s, and the `analytic` and
    `calibrated` predictions (the analytic model is not fitted, so it predicts every shape as it is).
    """
    shapes = df[list(SHAPE_COLUMNS)].drop_duplicates()
    if len(shapes) < 2:
        raise UserInputError("leave-one-shape-out needs a profile of at least two model shapes, got one")
    X, offset = features if features is not None else row_features(df, cluster)
    t = df["time_s"].to_numpy(dtype=float)
    strategies = df["strategy"].to_numpy()
    calibrated = np.empty(len(df))
    for shape in shapes.itertuples(index=False):
        held = np.ones(len(df), bool)
        for col, v in zip(SHAPE_COLUMNS, shape):
            held &= (df[col] == v).to_numpy()
        fitted = {}
        for strategy in sorted(set(strategies[held])):
            train = ~held & (strategies == strategy)
            if train.any():
                fitted[strategy] = fit_strategy(X[train], offset[train], t[train])
        calibrated[held] = predict(fitted, X[held], offset[held], strategies[held])
    out = df[["model", "strategy", "seq_len", "time_s"]].copy()
    out.insert(0, "shape", [shape_label(r) for r in df[["model", "h", "heads", "layers", "p"]].to_dict("records")])
    out["band"] = band_of(df["seq_len"].to_numpy())
    out["analytic"] = analytic_times(X, offset)
    out["calibrated"] = calibrated
    return out


def band_of(seq_len: np.ndarray) -> list[str]:
    """The `LENGTH_BANDS` label of each length."""
    labels = []
    for s in seq_len:
        labels.append(next(name for name, lo, hi in LENGTH_BANDS if lo < s <= hi))
    return labels


def mape(pred, true) -> float:
    """Mean absolute percentage error, as a fraction: mean |predicted - measured| / measured."""
    true = np.asarray(true, float)
    return float(np.mean(np.abs(np.asarray(pred, float) - true) / true))


def loso_summary(points: pd.DataFrame, models=("analytic", "calibrated")) -> dict:
    """Per model: leave-one-shape-out time MAPE (the mean over shapes of each held-out shape's MAPE), per
    strategy (the same mean, of that strategy's rows), per length band (pooled over the held-out rows of
    that band: bands hold different numbers of rows per shape) and per shape; all fractions."""
    out = {}
    for m in models:
        per_shape = {s: mape(g[m], g["time_s"]) for s, g in points.groupby("shape", sort=False)}
        by_strategy = {}
        for strategy, g in points.groupby("strategy", sort=True):
            by_strategy[strategy] = float(np.mean([mape(x[m], x["time_s"]) for _, x in g.groupby("shape")]))
        out[m] = {
            "time_mape_leave_one_shape_out": float(np.mean(list(per_shape.values()))),
            "by_strategy": by_strategy,
            "by_band": {b: mape(g[m], g["time_s"]) for b, g in points.groupby("band", sort=False)},
            "by_shape": per_shape,
        }
    return out


def calibration_toml(cluster: ClusterSpec, calibration: dict, base: str, source: str) -> str:
    """A cluster file: `base` plus `[calibration.STRATEGY]` tables (what `load_cluster_toml` reads)."""
    lines = [f"# {source}".replace("\n", " "), f"base = {json.dumps(base)}", f"source = {json.dumps(source)}", ""]
    for strategy in sorted(calibration):
        c = calibration[strategy]
        lines.append(f"[calibration.{strategy}]")
        lines += [f"{k} = {getattr(c, k)!r}" for k in CALIBRATION_PARAMETERS]
        lines.append("")
    return "\n".join(lines)
