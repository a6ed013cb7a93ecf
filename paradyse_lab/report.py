"""REPORT.md of a reproduction: the paper's numbers beside ours, how each was obtained, what differs and why.

Written by `paradyse-lab reproduce` (paradyse_lab/reproduce.py) from the CSVs in its results folder; every
number in the report comes from those CSVs or from the paper's constants in simulator/experiments.py.
`paper_vs_ours_markdown(results_dir)` returns the headline and Table 5 tables alone (for the README).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

NAMES = {"github_code": "GitHubCode", "grch38": "GRCh38", "bert": "BERT", "llama": "LLaMA", "gpt": "GPT",
         "static:megatron_ts": "MegatronTS", "static:megatron_cz": "MegatronCZ", "static:ulysses_z": "UlyssesZ",
         "static:metp": "METP", "dynamic:heuristic": "ParaDySe (heuristic)", "dynamic:dp": "dp",
         "dynamic:ilp": "ilp"}


def _pct(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.2f}%"


def _num(x, fmt="{:,.0f}") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _row(df: pd.DataFrame, **match) -> pd.Series:
    m = df
    for k, v in match.items():
        m = m[m[k] == v]
    return m.iloc[0]


def headline_rows(results: Path) -> list[list]:
    """Claim, paper, ours (heuristic), ours (dp), how, note."""
    h = pd.read_csv(results / "fig2_headline.csv")
    s = pd.read_csv(results / "fig2_summary.csv")
    rows = []
    for d, m, kind in (("github_code", "bert", "time"), ("github_code", "gpt", "length"),
                       ("grch38", "bert", "time"), ("grch38", "gpt", "length")):
        heur, dp = _row(h, dataset=d, model=m, policy="dynamic:heuristic"), _row(h, dataset=d, model=m,
                                                                               policy="dynamic:dp")
        if kind == "time":
            claim = f"{NAMES[d]}, {NAMES[m]}: training time saved (up to, vs the slowest baseline)"
            paper = _pct(heur["paper_time_reduction"])
            ours = f"{_pct(heur['max_time_reduction'])} (vs {NAMES.get(heur['against'], heur['against'])})"
            ours_dp = _pct(dp["max_time_reduction"])
        else:
            claim = f"{NAMES[d]}, {NAMES[m]}: trainable length extended (up to, vs the shortest-reaching baseline)"
            paper = _pct(heur["paper_length_extension"])
            ours = f"{_pct(heur['max_length_extension'])} (vs best baseline {_pct(heur['length_extension'])})"
            ours_dp = _pct(dp["max_length_extension"])
        rows.append([claim, paper, ours, ours_dp])
    for d in ("github_code", "grch38"):
        heur = _row(h, dataset=d, model="llama", policy="dynamic:heuristic")
        best = s[(s.dataset == d) & (s.model == "llama") & s.policy.str.startswith("static:")]
        best = best.sort_values("max_seq_len_trained").iloc[-1]
        mine = _row(s, dataset=d, model="llama", policy="dynamic:heuristic")
        rows.append([f"{NAMES[d]}, LLaMA: ParaDySe's max length vs the best baseline", "slightly shorter",
                     f"{mine['max_seq_len_trained']:,} vs {best['max_seq_len_trained']:,} "
                     f"({NAMES[best['policy']]}): {_pct(heur['length_extension'])}",
                     _pct(_row(h, dataset=d, model="llama", policy="dynamic:dp")["length_extension"])])
    rows.append(["Restart of a static framework after an OOM", "> 31 s", "31 s (an input of `restart:NAME`, "
                 "not measured)", "-"])
    return rows


def table5_rows(results: Path) -> list[list]:
    t = pd.read_csv(results / "table5.csv")
    rows = []
    for r in t.itertuples():
        label = r.variant
        if isinstance(r.profile_source, str) and r.profile_source:
            label += f" (plans with {r.plan_cost_model}, profile source={r.profile_source})"
        rows.append([label, _num(r.paper_max_len), _num(r.max_len), _num(r.paper_time_s, "{:,.2f}"),
                     _num(r.time_s, "{:,.2f}"), _num(r.time_full_s, "{:,.2f}"), _pct(r.paper_saving),
                     _pct(r.saving)])
    return rows


HEADLINE_HEADER = ["claim (PAPER.md s. 7)", "paper", "ours: heuristic (ParaDySe)", "ours: dp"]
TABLE5_HEADER = ["variant (GPT, GRCh38)", "paper max len", "ours max len", "paper time (s)", "ours time (s)",
                 "ours time full (s)", "paper saving", "ours saving"]


def paper_vs_ours_markdown(results: str | Path) -> str:
    """The headline and Table 5 tables, paper beside ours (markdown)."""
    results = Path(results)
    return (_table(HEADLINE_HEADER, headline_rows(results)) + "\n\nTable 5 (ablations):\n\n"
            + _table(TABLE5_HEADER, table5_rows(results)) + "\n")


def _panels(results: Path) -> str:
    s = pd.read_csv(results / "fig2_summary.csv")
    policies = list(dict.fromkeys(s.policy))
    rows = []
    for (d, m), g in s.groupby(["dataset", "model"], sort=False):
        cells = []
        for p in policies:
            r = g[g.policy == p].iloc[0]
            oom = "" if pd.isna(r.oom_at_seq_len) else " OOM"
            cells.append(f"{r.max_seq_len_trained / 1024:.0f}K / {r.total_time_s:.0f} s{oom}")
        rows.append([f"{NAMES[d]}, {NAMES[m]}"] + cells)
    return _table(["panel"] + [NAMES.get(p, p) for p in policies], rows)


def _solvers(results: Path) -> str:
    b = pd.read_csv(results / "solver_bench.csv")
    rows = []
    for (kind, solver), g in b.groupby(["kind", "solver"], sort=False):
        rows.append([kind, solver, _num(g["mean_gap_pct"].mean(), "{:.3f}%"), _num(g["max_gap_pct"].max(), "{:.3f}%"),
                     f"{int(g['layers'].max())}", _num(g.loc[g["layers"].idxmax(), "median_ms"], "{:.2f}")])
    q = pd.read_csv(results / "solver_quality_runs.csv")
    rows2 = [[f"{NAMES[r.dataset]}, {NAMES[r.model]}", NAMES[r.policy], _pct(r.gap_to_dp), f"{r.max_len:,}",
              f"{r.dp_max_len:,}", f"{r.solve_ms_mean:.2f}"] for r in q.itertuples()]
    return (_table(["problem kind", "solver", "mean gap to dp", "max gap to dp", "largest L", "median ms at largest L"],
                   rows) + "\n\nOn Figure 2's runs (total time over the steps both trained):\n\n"
            + _table(["panel", "policy", "time gap to dp", "max len", "dp max len", "mean solve ms"], rows2))


def _costmodel(results: Path) -> str:
    a = pd.read_csv(results / "costmodel_accuracy.csv")
    rows = []
    for name, g in a.groupby("cost_model", sort=False):
        i, e = g[g.split == "interp"].iloc[0], g[g.split == "extrap"].iloc[0]
        rows.append([name, _pct(i.time_mape), _pct(e.time_mape), _pct(i.mem_mape), _pct(e.mem_mape)])
    return (_table(["cost model", "time MAPE interp", "time MAPE extrap", "memory MAPE interp",
                    "memory MAPE extrap"], rows)
            + f"\n\nProfile source={a['source'].iloc[0]}: the truth here is the analytic model with seeded noise "
              "(paradyse_lab/costmodel/synthetic.py), so the analytic row measures that noise, not a real error.")


def _hybrid_note(results: Path) -> str:
    t = pd.read_csv(results / "table5.csv").set_index("variant")
    if "full (hybrid cost model)" not in t.index:
        return ""
    a, h = t.loc["full", "max_len"], t.loc["full (hybrid cost model)", "max_len"]
    return (f"- **Learned cost models stop early.** Planning with the hybrid model trains up to {h:,} tokens against "
            f"{a:,} with the analytic model: as in the paper, a learned model's budget is capped at the largest "
            "peak seen while profiling (its OOM threshold), and the source=analytic profile stops each strategy "
            "at its own OOM, so the cap is the lightest strategy's profiled peak.")


def write_report(results: str | Path, settings, timings: dict) -> Path:
    """results/REPORT.md from the CSVs in `results` (module docstring)."""
    results = Path(results)
    mode = "quick" if settings.quick else "full"
    cmd = "paradyse-lab reproduce" + (" --quick" if settings.quick else "") + f" --out {results}"
    steps = ", ".join(f"{k} {v:.1f} s" if v else f"{k} reused" for k, v in timings.items())
    figs = [("fig2_cumulative_time", "Figure 2: cumulative training time against sequence length; curves end "
             "at OOM (x)"), ("table5_ablation", "Table 5: ablations, paper beside ours"),
            ("solver_quality", "Solver quality: gap to the exact optimum and solve time against layers"),
            ("costmodel_accuracy", "Cost models: predicted against truth, inside and beyond the profiled range"),
            ("plan_map", "Plan map: strategy per layer and length, heuristic and dp"),
            ("memory_breakdown", "Memory per GPU of each uniform plan: model states, kept, transient")]
    fig_md = "\n\n".join(f"**{cap}** (`figures/{n}.py`)\n\n![{cap}](figures/{n}.png)" for n, cap in figs
                         if (results / "figures" / f"{n}.png").exists())
    text = f"""# ParaDySe reproduction report ({mode} run)

Generated by `{cmd}` from the CSVs in this folder; do not edit by hand. Steps: {steps}.
Workloads: {settings.size} sequences sampled per dataset from the paper's Table 3 bands (seed 0), sorted short
to long, batch size 1; node: {settings.cluster}, 1 GiB per GPU held back for the CUDA context and NCCL.

**Where our numbers come from.** Every time and memory figure below is simulated: plans are charged by the
analytic cost model (paradyse_lab/costmodel/, alpha-beta communication and roofline compute over each
strategy's schedule), not measured on GPUs. The learned cost models (the paper's random forest + polynomial)
are fitted on the bundled synthetic profile, labelled **source=analytic**: the analytic model plus seeded
noise. The paper's numbers were measured on 8x A100-80GB.

## Headline numbers

{_table(HEADLINE_HEADER, headline_rows(results))}

How: `paradyse-lab experiment fig2 --size {settings.size}` (fig2_headline.csv). Time saved = (T_baseline -
T_ours) / T_baseline over the steps both trained, the largest over the four static baselines; length
extension = our longest trained length / a baseline's - 1, against the baseline that stops first ("up to",
the paper's wording) and against the one that goes furthest.

## Figure 2, per panel (max length trained / cumulative time; OOM: the run ended at an OOM)

{_panels(results)}

## Table 5: ablations (GPT on GRCh38)

{_table(TABLE5_HEADER, table5_rows(results))}

How: `paradyse-lab experiment table5 --size {settings.size}` (table5.csv). Saving = (time - time full) / time,
with time full the full system's cumulative time at the variant's number of trained steps. The random-forest
ablation compares polynomial-only planning against hybrid planning, both fitted on the source=analytic
profile and both capped at the profile's OOM threshold (the largest peak profiled), as the paper does.

## Solver quality and solve time

{_solvers(results)}

How: solver_bench.csv (`paradyse-lab bench-solvers`, the problems of solvers/instances.py) and the runs of
Figure 2 (solver_quality_runs.csv).

## Cost-model accuracy (the paper gives none)

{_costmodel(results)}

How: costmodel_accuracy.csv / costmodel_points.csv, the split of `paradyse-lab ablate-costmodel`: each
profiled curve is cut at half its longest length; models fit below the cut on all but every 4th length
(interp = the held-out lengths), extrap = the lengths above the cut (up to 2x beyond the training range).

## What differs and why

- **Truth is a model, not a GPU.** Our times are the analytic model's. Absolute seconds are not comparable
  with the paper's (our GPT/GRCh38 run is shorter: fewer sampled sequences, and no framework overhead,
  allocator fragmentation or kernel launch gaps are modelled); compare shapes and ratios.
- **Time savings are smaller than the paper's 89% / 58%.** In our model the static baselines are well tuned
  (ZeRO-3 communication overlaps compute, MegatronTS is fast on short sequences), so a per-layer mix gains
  less; the paper's 89% was measured against a baseline our model does not make as slow (the paper's
  baseline implementations are not specified beyond their names).
- **Length extensions depend on where the baselines OOM.** Our OOM points come from the memory each
  schedule keeps (DESIGN.md s. 3) against 79 GiB usable; the paper's came from measured peaks. The per-panel
  table shows where each static strategy stops.
- **Table 5.** The structure matches (METP is what makes long sequences trainable; removing MegatronTS costs
  the most time; smoothing and the other ZeRO-3 strategy barely matter), the sizes do not: see the rows.
- **Peak memory is not additive.** Our peak is model states + kept activations + the largest transient (not
  the paper's per-layer sum), and switches between layouts that differ are charged; the paper charges none.
{_hybrid_note(results)}
- **Restart cost** (31 s) is the paper's number used as an input, not reproduced.

## Figures

{fig_md}
"""
    path = results / "REPORT.md"
    path.write_text(text)
    return path
