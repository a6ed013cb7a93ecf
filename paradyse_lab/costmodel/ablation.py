"""Accuracy of cost models on a profile: MAPE of time and peak memory, inside and beyond the profiled range.

The split (`split_profiles`), per (configuration, strategy option, batch) curve of a profile whose longest
length is S:

- the curve's rows with s <= S/2 are the ablation's profiled range; every `holdout_every`-th distinct length
  inside it (never its first or last) is held out: the interpolation test set; the rest is the training set;
- the rows with S/2 < s <= S are the extrapolation test set: up to 2x beyond the longest training length.

Models are fitted on the training rows of every curve together (one regressor per target, as deployed) and
scored on the held-out rows, which are what the profile measured (so a perfect model still shows the
profile's noise; see `synthetic` for the bundled profile's). The analytic model needs no fitting and is
scored on the same rows. `calibrated` (the analytic model with its four parameters per strategy fitted on
the training rows) is scored like a learned model. MAPE is a fraction: mean
|predicted - measured| / measured. Time MAPE is also reported per length band (`calibration.LENGTH_BANDS`).

`leave_one_shape_out` (`calibration`) is the other test: calibrate on every model shape of the profile but
one, predict the one left out, in turn; it needs a profile of two or more shapes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from paradyse_lab.cluster.spec import ClusterSpec
from paradyse_lab.costmodel.calibration import LENGTH_BANDS, band_of, calibrated_cluster, fit_calibration, mape
from paradyse_lab.costmodel.learned_fit import analytic_whole, fit_each, profile_cluster
from paradyse_lab.costmodel.names import LEARNED_KINDS
from paradyse_lab.costmodel.profiles import GROUP_COLUMNS
from paradyse_lab.errors import UserInputError, unknown_name

ABLATION_MODELS = ("analytic", "calibrated") + LEARNED_KINDS
METRICS = ("time_mape_interp", "time_mape_extrap", "mem_mape_interp", "mem_mape_extrap")
MIN_LENGTHS = 6
"""A curve needs this many distinct lengths inside S/2 to take part in the split."""


def split_profiles(df: pd.DataFrame, holdout_every: int = 4) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(train, interpolation test, extrapolation test) rows of a validated profile (module docstring)."""
    if holdout_every < 2:
        raise UserInputError(f"holdout_every must be >= 2, got {holdout_every}")
    part = pd.Series("", index=df.index)
    for _, g in df.groupby(list(GROUP_COLUMNS), sort=False):
        longest = g["seq_len"].max()
        inside = g["seq_len"] * 2 <= longest
        lengths = np.sort(g.loc[inside, "seq_len"].unique())
        if len(lengths) < MIN_LENGTHS:
            part[g.index] = "skip"
            continue
        held = set(lengths[1:-1][::holdout_every].tolist())
        part[g.index[inside]] = np.where(g.loc[inside, "seq_len"].isin(held), "interp", "train")
        part[g.index[~inside]] = "extrap"
    train, interp, extrap = (df[part == k].reset_index(drop=True) for k in ("train", "interp", "extrap"))
    if train.empty or interp.empty or extrap.empty:
        raise UserInputError(f"the profile has no curve with {MIN_LENGTHS} distinct lengths up to half its longest "
                             "length: nothing to hold out")
    return train, interp, extrap


def accuracy(df: pd.DataFrame, models=ABLATION_MODELS, cluster: ClusterSpec | None = None,
             holdout_every: int = 4) -> tuple[dict, pd.DataFrame]:
    """Per model, the four MAPEs over all test rows; and one row per (model, strategy) with the same four.

    Returns (summary {model: {metric: float}}, per-strategy frame).
    """
    for m in models:
        if m not in ABLATION_MODELS:
            raise unknown_name("cost model", m, ABLATION_MODELS)
    train, interp, extrap = split_profiles(df, holdout_every)
    cl = profile_cluster(df, cluster)
    tests = {"interp": interp, "extrap": extrap}
    preds: dict = {}
    fits = fit_each([m for m in models if m not in ("analytic", "calibrated")], train, cl)
    for m in models:
        if m == "analytic":
            preds[m] = {k: analytic_whole(t, cl) for k, t in tests.items()}
        elif m == "calibrated":
            calibrated = calibrated_cluster(cl, fit_calibration(train, cl))
            preds[m] = {k: analytic_whole(t, calibrated) for k, t in tests.items()}
        else:
            preds[m] = {k: fits[m].predict_rows(t) for k, t in tests.items()}
    summary, rows = {}, []
    both = pd.concat([interp, extrap], ignore_index=True)
    bands = np.array(band_of(both["seq_len"].to_numpy()))
    for m in models:
        summary[m] = metrics_by_target(preds[m], tests, None)
        pred_time = np.concatenate([preds[m]["interp"][0], preds[m]["extrap"][0]])
        summary[m]["time_mape_by_band"] = {b: mape(pred_time[bands == b], both["time_s"].to_numpy()[bands == b])
                                           for b, _, _ in LENGTH_BANDS if (bands == b).any()}
        for strategy in sorted(set(interp["strategy"]) | set(extrap["strategy"])):
            rows.append({"model": m, "strategy": strategy, **metrics_by_target(preds[m], tests, strategy)})
    return summary, pd.DataFrame(rows)


def metrics_by_target(pred: dict, tests: dict, strategy: str | None) -> dict:
    """The four MAPEs (`METRICS`) of predictions {split: (time, memory)} on the test rows {split: rows}, over
    one strategy's rows (or all with None)."""
    out = {}
    for target, i, col in (("time", 0, "time_s"), ("mem", 1, "peak_bytes")):
        for k, t in tests.items():
            mask = np.ones(len(t), bool) if strategy is None else (t["strategy"] == strategy).to_numpy()
            out[f"{target}_mape_{k}"] = mape(pred[k][i][mask], t[col].to_numpy()[mask]) if mask.any() else None
    return {m: out[m] for m in METRICS}
