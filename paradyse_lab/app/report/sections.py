"""The report's sections on switching memory, calibration, solvers and cost models, each read from the
step's CSVs.

Part of REPORT.md (written by `paradyse-lab reproduce`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from paradyse_lab.app.report.markdown import (
    NAMES,
    PAPER_STATICS,
    SWITCH_SUBDIR,
    TRUTH_LABELS,
    first_row,
    fmt_num,
    fmt_pct,
    md_table,
    read_csv,
    truth_dirs,
)
from paradyse_lab.results.timings import read_with_timings


def switch_memory_section(results: Path) -> str:
    rows, t5 = [], []
    for truth, folder in truth_dirs(results).items():
        on_dir = results / SWITCH_SUBDIR / truth
        if not all((on_dir / f).exists() for f in ("fig2_summary.csv", "table5.csv")):
            continue
        off, on = read_csv(folder / "fig2_summary.csv"), read_csv(on_dir / "fig2_summary.csv")
        for (d, m), g in on.groupby(["dataset", "model"], sort=False):
            statics = g[g.policy.isin(PAPER_STATICS)].sort_values("max_seq_len_trained")
            best = statics.iloc[-1]
            h_off = first_row(off, dataset=d, model=m, policy="dynamic:heuristic")
            h_on = first_row(g, dataset=d, model=m, policy="dynamic:heuristic")
            oom = "" if pd.isna(h_on["oom_at_seq_len"]) else f" (OOM at {int(h_on['oom_at_seq_len']):,})"
            rows.append([f"{NAMES[d]}, {NAMES[m]}", TRUTH_LABELS[truth],
                         f"{best['max_seq_len_trained']:,} ({NAMES[best['policy']]})",
                         f"{h_off['max_seq_len_trained']:,}", f"{h_on['max_seq_len_trained']:,}{oom}"])
        t_off = read_csv(folder / "table5.csv").set_index("variant")
        t_on = read_csv(on_dir / "table5.csv").set_index("variant")
        t5 += [[v, TRUTH_LABELS[truth], fmt_num(t_off.loc[v, "paper_max_len"]), fmt_num(t_off.loc[v, "max_len"]),
                fmt_num(t_on.loc[v, "max_len"])] for v in t_on.index if v in t_off.index]
    if not rows:
        return "(not run)"
    return (md_table(["panel", "truth", "longest static (its max len)", "ParaDySe max len, switching memory off",
                    "ParaDySe max len, on"], rows)
            + "\n\nTable 5 with the switching memory (paper: 300,032 for most ablations):\n\n"
            + md_table(["variant", "truth", "paper max len", "ours, off", "ours, on"], t5))


def calibration_section(results: Path) -> str:
    path = results / "calibration_loso.csv"
    if not path.exists():
        return "(not run)"
    loso = read_csv(path)
    strategies = list(dict.fromkeys(loso[loso.kind == "strategy"]["key"]))
    bands = list(dict.fromkeys(loso[loso.kind == "band"]["key"]))
    rows = []
    for m, g in loso.groupby("cost_model", sort=False):
        val = {(r.kind, r.key): r.time_mape for r in g.itertuples()}
        rows.append([m, fmt_pct(val["mean", "all"])] + [fmt_pct(val["strategy", k]) for k in strategies]
                    + [fmt_pct(val["band", b]) for b in bands])
    params = read_csv(results / "calibration_params.csv")
    prow = [[r.strategy, f"{r.compute_scale:.3f}", f"{r.comm_scale:.3f}", f"{1e3 * r.layer_overhead_s:.2f} ms",
             f"{1e6 * r.width_overhead_s:.3f} us"] for r in params.itertuples()]
    acc = read_csv(results / "costmodel_paper_accuracy.csv")
    arow = []
    for m, g in acc.groupby("cost_model", sort=False):
        val = {r.split: (r.time_mape, r.mem_mape) for r in g.itertuples()}
        arow.append([m, fmt_pct(val["interp"][0]), fmt_pct(val["extrap"][0])]
                    + [fmt_pct(val.get(f"band {b}", (None,))[0]) for b in bands]
                    + [fmt_pct(val["interp"][1]), fmt_pct(val["extrap"][1])])
    return (md_table(["leave one shape out (time MAPE)", "mean"] + strategies + bands, rows)
            + "\n\nParameters fitted on all four shapes (`paradyse-lab costmodel fit-calibration`, stored as the "
            "cluster `a100-80gb-x8-paper`):\n\n"
            + md_table(["strategy", "compute scale", "comm scale", "fixed per layer", "fixed per layer and unit of h"],
                     prow)
            + "\n\nEvery cost model on the paper profile, the split of `costmodel ablate` (fitted below half of each "
              "curve's longest length; interp = held-out lengths there, extrap = beyond):\n\n"
            + md_table(["cost model", "time interp", "time extrap"] + [f"time {b}" for b in bands]
                     + ["memory interp", "memory extrap"], arow))


def solvers_section(results: Path) -> str:
    b = read_with_timings(results / "solver_bench.csv")
    rows = []
    for (kind, solver), g in b.groupby(["kind", "solver"], sort=False):
        rows.append([kind, solver, fmt_num(g["mean_gap_pct"].mean(), "{:.3f}%"),
                     fmt_num(g["max_gap_pct"].max(), "{:.3f}%"),
                     f"{int(g['layers'].max())}", fmt_num(g.loc[g["layers"].idxmax(), "median_ms"], "{:.2f}")])
    q = read_with_timings(results / "solver_quality_runs.csv")
    rows2 = [[f"{NAMES[r.dataset]}, {NAMES[r.model]}", NAMES[r.policy], fmt_pct(r.gap_to_dp), f"{r.max_len:,}",
              f"{r.dp_max_len:,}", f"{r.solve_ms_mean:.2f}"] for r in q.itertuples()]
    return (md_table(["problem kind", "solver", "mean gap to dp", "max gap to dp", "largest L",
                      "median ms at largest L"], rows)
            + "\n\nOn Figure 2's runs (total time over the steps both trained):\n\n"
            + md_table(["panel", "policy", "time gap to dp", "max len", "dp max len", "mean solve ms"], rows2))


def costmodel_section(results: Path) -> str:
    a = read_csv(results / "costmodel_accuracy.csv")
    rows = []
    for name, g in a.groupby("cost_model", sort=False):
        i, e = g[g.split == "interp"].iloc[0], g[g.split == "extrap"].iloc[0]
        rows.append([name, fmt_pct(i.time_mape), fmt_pct(e.time_mape), fmt_pct(i.mem_mape), fmt_pct(e.mem_mape)])
    return (md_table(["cost model", "time MAPE interp", "time MAPE extrap", "memory MAPE interp",
                    "memory MAPE extrap"], rows)
            + f"\n\nProfile source={a['source'].iloc[0]}: the truth here is the analytic model with seeded noise "
              "(paradyse_lab/costmodel/synthetic.py), so the analytic row measures that noise, not a real error.")


def hybrid_note(results: Path) -> str:
    t = read_csv(results / "table5.csv").set_index("variant")
    if "full (hybrid cost model)" not in t.index:
        return ""
    a, h = t.loc["full", "max_len"], t.loc["full (hybrid cost model)", "max_len"]
    if h >= a:  # the cap did not bind on this workload
        return ""
    return (f"- **Learned cost models stop early under the analytic truth.** Planning with the hybrid model "
            f"trains up to {h:,} tokens against {a:,} with the analytic model: as in the paper, a learned model's "
            "budget is capped at the largest peak seen while profiling (its OOM threshold), and the synthetic "
            "profile stops each strategy at its own OOM, so the cap is the lightest strategy's profiled peak.")
