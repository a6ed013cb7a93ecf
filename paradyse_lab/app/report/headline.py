"""The paper's headline claims and Table 5 beside ours under each truth, and Figure 2 per panel.

Part of REPORT.md (written by `paradyse-lab reproduce`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from paradyse_lab.app.report.markdown import (
    NAMES,
    PAPER_STATICS,
    TRUTH_LABELS,
    first_row,
    fmt_num,
    fmt_pct,
    md_table,
    read_csv,
    truth_dirs,
)

HEADLINE_CLAIMS = (("github_code", "bert", "time"), ("github_code", "gpt", "length"), ("grch38", "bert", "time"),
                   ("grch38", "gpt", "length"), ("github_code", "llama", "llama"), ("grch38", "llama", "llama"))


def claim_text(d: str, m: str, kind: str) -> str:
    if kind == "time":
        return f"{NAMES[d]}, {NAMES[m]}: training time saved"
    if kind == "length":
        return f"{NAMES[d]}, {NAMES[m]}: trainable length extended"
    return f"{NAMES[d]}, LLaMA: ParaDySe's max length vs the best baseline"


def _paper_value(d: str, m: str, kind: str, h: pd.DataFrame) -> str:
    row = first_row(h, dataset=d, model=m, policy="dynamic:heuristic")
    if kind == "time":
        return fmt_pct(row["paper_time_reduction"])
    if kind == "length":
        return fmt_pct(row["paper_length_extension"])
    return "slightly shorter"


def _our_value(results: Path, d: str, m: str, kind: str, policy: str) -> str:
    """One headline number of one truth's runs (definitions: `METRICS_TEXT`)."""
    h = read_csv(results / "fig2_headline.csv")
    row = first_row(h, dataset=d, model=m, policy=policy)
    if kind == "time":
        return f"{fmt_pct(row['max_time_reduction'])} (vs {NAMES.get(row['against'], row['against'])})"
    s = read_csv(results / "fig2_summary.csv")
    statics = s[(s.dataset == d) & (s.model == m) & s.policy.isin(PAPER_STATICS)]
    if kind == "length":
        return _length_text(row, first_row(s, dataset=d, model=m, policy=policy), statics)
    best = statics.sort_values("max_seq_len_trained").iloc[-1]
    mine = first_row(s, dataset=d, model=m, policy=policy)
    return (f"{mine['max_seq_len_trained']:,} vs {best['max_seq_len_trained']:,} ({NAMES[best['policy']]}): "
            f"{fmt_pct(row['length_extension'])}")


def _length_text(row, mine, statics: pd.DataFrame) -> str:
    """The length extension against the static baseline that stops first (the paper's "up to") and against
    the one that reaches furthest, each named with the lengths the ratio divides."""
    reached = statics[statics.max_seq_len_trained > 0].sort_values(["max_seq_len_trained", "policy"])
    if reached.empty:
        return f"{fmt_pct(row['max_length_extension'])} (no baseline trained a step)"
    ours = int(mine["max_seq_len_trained"])
    worst, best = reached.iloc[0], reached.iloc[-1]
    return (f"{fmt_pct(row['max_length_extension'])} vs {NAMES[worst['policy']]} "
            f"({ours:,} / {int(worst['max_seq_len_trained']):,}); vs the strongest, {NAMES[best['policy']]}: "
            f"{fmt_pct(row['length_extension'])} ({ours:,} / {int(best['max_seq_len_trained']):,})")


def headline_rows(results: Path) -> list[list]:
    """Claim, paper, then per truth: ours (heuristic), ours (dp)."""
    dirs = truth_dirs(results)
    h = read_csv(Path(results) / "fig2_headline.csv")
    rows = []
    for d, m, kind in HEADLINE_CLAIMS:
        row = [claim_text(d, m, kind), _paper_value(d, m, kind, h)]
        for folder in dirs.values():
            row += [_our_value(folder, d, m, kind, "dynamic:heuristic"), _our_value(folder, d, m, kind, "dynamic:dp")]
        rows.append(row)
    rows.append(["Restart of a static framework after an OOM", "> 31 s"]
                + ["31 s (an input of `restart:NAME`, not measured)", "-"] * len(dirs))
    return rows


def headline_header(results: Path) -> list[str]:
    head = ["claim", "paper"]
    for truth in truth_dirs(results):
        head += [f"ours, {TRUTH_LABELS[truth]}: heuristic (ParaDySe)", f"ours, {TRUTH_LABELS[truth]}: dp"]
    return head


METRICS_TEXT = (
    "Definitions (one each, used everywhere): **time saved** = (T_baseline - T_ours) / T_baseline, T the "
    "cumulative training time over the steps both runs trained, reported against the baseline for which it "
    "is largest (the slowest; the paper's \"up to\"); **length extended** = our longest trained length / the "
    "baseline's - 1, against the static baseline that stops first (the paper's \"up to\"), named with the "
    "lengths it divides, then against the strongest (the baseline that goes furthest).")


def table5_rows(results: Path) -> list[list]:
    """Variant, then max length, time and saving: the paper's and each truth's."""
    dirs = truth_dirs(results)
    tables = {k: read_csv(v / "table5.csv").set_index("variant") for k, v in dirs.items()}
    base = tables["analytic"]
    rows = []
    for variant in base.index:
        r = base.loc[variant]
        label = variant
        if isinstance(r["profile_source"], str) and r["profile_source"]:
            label += f" (plans with {r['plan_cost_model']} fitted on that truth's profile)"
        row = [label, fmt_num(r["paper_max_len"])]
        row += [fmt_num(t.loc[variant, "max_len"]) if variant in t.index else "-" for t in tables.values()]
        row += [fmt_num(r["paper_time_s"], "{:,.2f}")]
        row += [fmt_num(t.loc[variant, "time_s"], "{:,.2f}") if variant in t.index else "-" for t in tables.values()]
        row += [fmt_pct(r["paper_saving"])]
        row += [fmt_pct(t.loc[variant, "saving"]) if variant in t.index else "-" for t in tables.values()]
        rows.append(row)
    return rows


def table5_header(results: Path) -> list[str]:
    truths = [TRUTH_LABELS[t] for t in truth_dirs(results)]
    return (["variant (GPT, GRCh38)", "paper max len"] + [f"ours max len, {t}" for t in truths] + ["paper time (s)"]
            + [f"ours time (s), {t}" for t in truths] + ["paper saving"] + [f"ours saving, {t}" for t in truths])


def paper_vs_ours_markdown(results: str | Path) -> str:
    """The headline and Table 5 tables, paper beside ours under each truth (markdown, for the README)."""
    results = Path(results)
    return (md_table(headline_header(results), headline_rows(results)) + "\n\n" + METRICS_TEXT
            + "\n\nTable 5 (ablations):\n\n" + md_table(table5_header(results), table5_rows(results)) + "\n")


def panels_table(results: Path) -> str:
    s = read_csv(results / "fig2_summary.csv")
    policies = [p for p in dict.fromkeys(s.policy) if p in NAMES]  # the paper's policies and dp / ilp
    rows = []
    for (d, m), g in s.groupby(["dataset", "model"], sort=False):
        cells = []
        for p in policies:
            r = g[g.policy == p].iloc[0]
            oom = "" if pd.isna(r.oom_at_seq_len) else " OOM"
            cells.append(f"{r.max_seq_len_trained / 1024:.0f}K / {r.total_time_s:.0f} s{oom}")
        rows.append([f"{NAMES[d]}, {NAMES[m]}"] + cells)
    return md_table(["panel"] + [NAMES.get(p, p) for p in policies], rows)
