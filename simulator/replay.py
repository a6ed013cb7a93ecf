"""Simulate a training run that was executed, step for step, and compare the two.

Library module of `paradyse-lab validate-run --out DIR`: the
runtime trains each policy for real and logs every step's length and time; `replay` runs the same policy
over the same lengths in the simulator with the same cost model, cluster and memory
budget as the training planned with, so a dynamic policy picks the same plans (`plan_match` says whether it
did) and every step gets a predicted time (the cost model's time of the plan). `compare` turns the pairs
into the table: per policy, measured and predicted totals, the error of the predicted total, per-step MAPE,
the rankings of the policies by measured and by predicted total (they agree when no pair of policies is
predicted one way round and measured the other; policies predicted equal, e.g. two that run the same plans,
order nothing), and each dynamic policy's speed-up over
the best static policy, measured and simulated. The first `skip` steps of every run (start-up: thread pools,
allocator, first-call setup of each collective) are left out of every number.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from paradyse_lab.simulator.engine import simulate
from paradyse_lab.simulator.planner import build_planner
from paradyse_lab.workload.lengths import Workload

STEP_COLUMNS = ("policy", "step", "seq_len", "measured_s", "predicted_s", "measured_cum_s", "predicted_cum_s",
                "plan", "simulated_plan", "plan_match", "counted", "repeats", "measured_min_s", "measured_max_s")
"""One executed step beside its simulation (validate_run.csv); measured_s is the median over the repeated
runs, measured_min_s / measured_max_s their extremes."""


def replay(policy_spec: str, lengths, spec, cost_model, budget_bytes: int, recompute: bool = False) -> pd.DataFrame:
    """The simulator's rows (engine.ROW_COLUMNS) for `policy_spec` over exactly `lengths`, planned and charged
    by `cost_model` (built for `spec` at the run's p) under `budget_bytes`."""
    planner = build_planner(policy_spec, spec, cost_model.cluster, cost_model=cost_model, budget_bytes=budget_bytes,
                            recompute=recompute)  # the run's +recompute / +sublayer, as train reads them
    workload = Workload("executed", tuple(int(s) for s in lengths))
    return simulate(workload, planner.policy, planner.charger())


def compare(steps: pd.DataFrame, statics, dynamics) -> dict:
    """Per-policy metrics, rankings and speed-ups from STEP_COLUMNS rows (counted steps only). A policy with a
    step the simulation ran out of memory on (predicted_s NaN) is marked `simulated_oom` and left out of the
    rankings and speed-ups: its predicted total would be short."""
    counted = steps[steps["counted"]]
    out = {}
    for name, g in counted.groupby("policy", sort=False):
        meas, pred = g["measured_s"].to_numpy(float), g["predicted_s"].to_numpy(float)
        out[name] = {"measured_total_s": float(meas.sum()), "predicted_total_s": float(pred.sum()),
                     "total_error": float(pred.sum() / meas.sum() - 1) if meas.sum() else None,
                     "step_mape": float(np.mean(np.abs(pred - meas) / meas)) if len(meas) else None,
                     "steps": int(len(g)), "plans_match": bool(g["plan_match"].all()),
                     "repeats": int(g["repeats"].min()),
                     # how far apart the repeated runs were: the steps' (max - min) over the total
                     "spread": float((g["measured_max_s"] - g["measured_min_s"]).sum() / meas.sum())}
    for name in out:  # a policy the simulation ran out of memory on has no total to rank
        out[name]["simulated_oom"] = bool(np.isnan(counted.loc[counted["policy"] == name, "predicted_s"]).any())
    names = [n for n in list(statics) + list(dynamics) if n in out and not out[n]["simulated_oom"]]
    by_meas = sorted(names, key=lambda n: out[n]["measured_total_s"])
    by_pred = sorted(names, key=lambda n: out[n]["predicted_total_s"])
    for n in names:
        out[n]["measured_rank"] = by_meas.index(n) + 1
        out[n]["predicted_rank"] = by_pred.index(n) + 1
    speedups = {}
    st = [n for n in statics if n in out]
    if st:
        best_m = min(st, key=lambda n: out[n]["measured_total_s"])
        best_p = min(st, key=lambda n: out[n]["predicted_total_s"])
        for d in dynamics:
            if d in out:
                speedups[d] = {
                    "measured": out[best_m]["measured_total_s"] / out[d]["measured_total_s"],
                    "simulated": out[best_p]["predicted_total_s"] / out[d]["predicted_total_s"],
                    "best_static_measured": best_m, "best_static_simulated": best_p}
    # pairs the prediction orders one way and the measurement the other (equal predictions order nothing)
    reversed_pairs = [[a, b] for i, a in enumerate(names) for b in names[i + 1:]
                      if (out[a]["predicted_total_s"] - out[b]["predicted_total_s"])
                      * (out[a]["measured_total_s"] - out[b]["measured_total_s"]) < 0]
    return {"policies": out, "ranking": {"measured": by_meas, "predicted": by_pred, "agree": not reversed_pairs,
                                         "reversed_pairs": reversed_pairs,
                                         "kendall_tau": kendall_tau(by_meas, by_pred)},
            "speedup_over_best_static": speedups}


def agreement_where_separated(result: dict, run_totals: dict[str, tuple[float, float]]) -> dict:
    """Whether the predicted ranking orders every pair of policies that the measurement separates as the
    measurement does. A pair is separated when the [min, max] of its two policies' repeated run totals
    (`run_totals`) do not overlap, and then the runs say which policy is faster (the one whose runs all ended
    sooner; the per-step medians' sum, `measured_total_s`, can lie outside a policy's run totals and is not
    used). Where the runs overlap they did not measure which is faster, so the pair can neither confirm nor
    contradict a prediction. {"pairs": ranked pairs, "separated": pairs the runs separate, "reversed": the
    separated pairs predicted the other way round, as [faster, slower], "agree": none reversed}."""
    ranked, policies = result["ranking"]["measured"], result["policies"]
    separated, flipped = 0, []
    for i, a in enumerate(ranked):
        for b in ranked[i + 1:]:
            (lo_a, hi_a), (lo_b, hi_b) = run_totals[a], run_totals[b]
            if not (hi_a < lo_b or hi_b < lo_a):
                continue
            separated += 1
            fast, slow = (a, b) if hi_a < lo_b else (b, a)
            if policies[fast]["predicted_total_s"] > policies[slow]["predicted_total_s"]:
                flipped.append([fast, slow])
    n = len(ranked)
    return {"pairs": n * (n - 1) // 2, "separated": separated, "reversed": flipped, "agree": not flipped}


def kendall_tau(a: list, b: list) -> float | None:
    """Kendall's rank correlation of two orderings of the same items (1: identical, -1: reversed)."""
    n = len(a)
    if n < 2:
        return None
    pos = {x: i for i, x in enumerate(b)}
    score = 0
    for i in range(n):
        for j in range(i + 1, n):
            score += 1 if pos[a[i]] < pos[a[j]] else -1
    return score / (n * (n - 1) / 2)
