"""Where the BERT savings come from (saving per length cutoff) and the runs beyond the
paper (recomputation, sub-layer plans, the tiled MLP and activation offload).

Part of REPORT.md (written by `paradyse-lab reproduce`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from paradyse_lab.app.report.markdown import NAMES, TRUTH_LABELS, first_row, fmt_pct, read_csv, truth_dirs
from paradyse_lab.simulator.experiments import BEYOND_SERIES
from paradyse_lab.simulator.results import run_path
from paradyse_lab.workload.lengths import get_workload

CUTOFFS = (4 * 1024, 16 * 1024, 64 * 1024)


def saving_up_to(results: Path, dataset: str, model: str, baseline: str, cutoff: int | None) -> float | None:
    """Time saved by the heuristic against `baseline` over the steps both trained whose length is at most
    `cutoff` (None: all of them): how the run's saving depends on its longest sequences."""
    dyn = read_csv(run_path(results, "fig2", dataset, model, "dynamic:heuristic"))
    base = read_csv(run_path(results, "fig2", dataset, model, baseline))
    both = min(int((~dyn["oom"]).sum()), int((~base["oom"]).sum()))
    d, b = dyn.iloc[:both], base.iloc[:both]
    if cutoff is not None:
        d, b = d[d["seq_len"] <= cutoff], b[b["seq_len"] <= cutoff]
    total = float(b["charged_time_s"].sum())
    return (total - float(d["charged_time_s"].sum())) / total if total else None


def bert_gap_rows(results: Path) -> list[list]:
    """Per BERT panel and truth: the paper's saving, ours over the sequences up to each cutoff, and ours over all."""
    rows = []
    for truth, folder in truth_dirs(results).items():
        h = read_csv(folder / "fig2_headline.csv")
        for d in ("github_code", "grch38"):
            r = first_row(h, dataset=d, model="bert", policy="dynamic:heuristic")
            if not isinstance(r["against"], str):
                continue
            share = long_time_share(folder, d, "bert", r["against"], CUTOFFS[-1])
            rows.append([f"{NAMES[d]}, BERT", TRUTH_LABELS[truth], NAMES[r["against"]],
                         fmt_pct(r["paper_time_reduction"])]
                        + [fmt_pct(saving_up_to(folder, d, "bert", r["against"], c)) for c in CUTOFFS]
                        + [fmt_pct(saving_up_to(folder, d, "bert", r["against"], None)), fmt_pct(share)])
    return rows


def long_time_share(results: Path, dataset: str, model: str, baseline: str, cutoff: int) -> float:
    """Fraction of the baseline run's time spent on sequences longer than `cutoff`."""
    b = read_csv(run_path(results, "fig2", dataset, model, baseline))
    b = b[~b["oom"]]
    return float(b.loc[b["seq_len"] > cutoff, "charged_time_s"].sum() / b["charged_time_s"].sum())


def beyond_series() -> tuple[str, ...]:
    """The labels of fig2_beyond.csv's series (`BEYOND_SERIES`), then the best static
    strategy with recomputation."""
    return tuple(label for label, _ in BEYOND_SERIES) + ("best static + recompute",)


def beyond_header() -> list[str]:
    return ["panel", "truth", *beyond_series()]


def _technique_note(r) -> str:
    """Where a series' plans took the tiled MLP or offload ('' for a series that offers neither)."""
    if "tiled" not in r.policy and "offload" not in r.policy:
        return ""
    if pd.isna(r.shortest_with_technique):
        return " (neither taken)"
    return (f" (tiled MLP in {r.tiled_steps} steps, offload in {r.offload_steps}, from "
            f"{r.shortest_with_technique / 1024:,.0f}K)")


def beyond_rows(results: Path) -> list[list]:
    """Per truth and panel: longest length trained / cumulative time of each series of fig2_beyond.csv
    ('-' where a series was not run), and where the series with the tiled MLP and offload took them."""
    rows = []
    for truth, folder in truth_dirs(results).items():
        path = folder / "fig2_beyond.csv"
        if not path.exists():
            continue
        b = read_csv(path)
        for (d, m), g in b.groupby(["dataset", "model"], sort=False):
            cells = dict.fromkeys(beyond_series(), "-")
            for r in g.itertuples():
                oom = "" if pd.isna(r.oom_at_seq_len) else " OOM"
                name = "" if not r.series.startswith("best") else f" ({r.policy.split(':')[1]})"
                cells[r.series] = (f"{r.max_seq_len_trained / 1024:,.0f}K / {r.total_time_s:,.0f} s{oom}{name}"
                                   f"{_technique_note(r)}")
            rows.append([f"{NAMES[d]}, {NAMES[m]}", TRUTH_LABELS[truth]] + list(cells.values()))
    return rows


def beyond_target(results: Path, settings) -> str:
    """The GPT / GRCh38 targets: dp + recompute trains the whole dataset within 10% of the fastest series that
    does without the tiled MLP or offload, and the series with the tiled MLP and offload trains it faster than
    recomputation alone (`_techniques_target`)."""
    longest = max(get_workload("grch38", settings.size, 0, sampling=settings.sampling).lengths)
    lines = []
    for truth, folder in truth_dirs(results).items():
        path = folder / "fig2_beyond.csv"
        if not path.exists():
            continue
        g = read_csv(path).query("dataset == 'grch38' and model == 'gpt'")
        mine = g[g.series == "dp + recompute"]
        if mine.empty:
            continue
        mine = mine.iloc[0]
        techniques = g.policy.str.contains(r"\+tiled|\+offload")  # their own target: `_techniques_target`
        reach = g[(g.max_seq_len_trained >= longest) & ~techniques].sort_values("total_time_s")
        if mine.max_seq_len_trained < longest:
            lines.append(f"under the {TRUTH_LABELS[truth]}, not met: dp + recompute stops at "
                         f"{mine.max_seq_len_trained:,} of {longest:,} tokens")
            continue
        best = reach.iloc[0]
        gap = mine.total_time_s / best.total_time_s - 1
        lines.append(f"under the {TRUTH_LABELS[truth]}, dp + recompute trains the whole dataset (longest sequence "
                     f"{longest:,} tokens) in {mine.total_time_s:,.1f} s, {100 * gap:.1f}% above the fastest series "
                     f"with recomputation alone that does ({best.series}, {best.total_time_s:,.1f} s): "
                     f"{'met' if gap <= 0.10 else 'not met'}{_techniques_target(g, longest)}")
    return "; ".join(lines) or "not run"


def _techniques_target(g: pd.DataFrame, longest: int) -> str:
    """The series with the tiled MLP and offload against the fastest recompute-only series (dp + recompute, with
    or without sub-layer plans) on the whole dataset: ', and ...' ('' where the series was not run)."""
    ours = g[g.policy.str.contains("tiled") & g.policy.str.contains("offload")]
    recompute_only = g[g.series.isin(("dp + recompute", "dp + recompute + sub-layer"))]
    recompute_only = recompute_only[recompute_only.max_seq_len_trained >= longest].sort_values("total_time_s")
    if ours.empty or recompute_only.empty:
        return ""
    ours, base = ours.iloc[0], recompute_only.iloc[0]
    if ours.max_seq_len_trained < longest:
        return f", and {ours.series} stops at {ours.max_seq_len_trained:,} tokens (faster plan: not met)"
    saving = 1 - ours.total_time_s / base.total_time_s
    return (f", and {ours.series} trains it in {ours.total_time_s:,.1f} s, {100 * saving:.1f}% less than "
            f"{base.series} (faster plan than recomputation alone: {'met' if saving > 0 else 'not met'})")
