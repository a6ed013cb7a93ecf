"""Figure 2's headline metrics over the workload seeds (mean [min, max]), and the sampled workloads' own band
shares beside Table 3's.

Part of REPORT.md (written by `paradyse-lab reproduce`); the seeds'
metrics come from fig2_headline_seeds.csv (the reproduction's `seeds` step)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from paradyse_lab.app.report.headline import HEADLINE_CLAIMS, claim_text
from paradyse_lab.app.report.markdown import NAMES, TRUTH_LABELS, fmt_pct, md_table, read_csv
from paradyse_lab.workload.lengths import BAND_NAMES, PAPER_DATASETS, get_workload

SEEDS_FILE = "fig2_headline_seeds.csv"
CLAIM_COLUMNS = {"time": ("max_time_reduction", "paper_time_reduction"),
                 "length": ("max_length_extension", "paper_length_extension"),
                 "llama": ("length_extension", None)}
"""Per kind of headline claim: the fig2_headline.csv column that measures it (definitions: METRICS_TEXT),
and the paper's value's column."""


def spread(values: pd.Series) -> str:
    """`mean [min, max]` of a metric over the seeds, in percent."""
    v = values.dropna()
    if v.empty:
        return "-"
    return f"{fmt_pct(v.mean())} [{fmt_pct(v.min())}, {fmt_pct(v.max())}]"


def seed_spread(results: Path) -> pd.DataFrame | None:
    """Per truth and headline claim: the metric's mean, min and max over the seeds, and the seeds' count."""
    path = Path(results) / SEEDS_FILE
    if not path.exists():
        return None
    df = read_csv(path)
    rows = []
    for truth, by_truth in df.groupby("truth", sort=False):
        for d, m, kind in HEADLINE_CLAIMS:
            column, paper = CLAIM_COLUMNS[kind]
            g = by_truth[(by_truth.dataset == d) & (by_truth.model == m)]
            v = g[column].dropna()
            rows.append({"truth": truth, "dataset": d, "model": m, "claim": kind, "metric": column,
                         "seeds": int(g.seed.nunique()), "mean": v.mean() if len(v) else None,
                         "min": v.min() if len(v) else None, "max": v.max() if len(v) else None,
                         "paper": g[paper].iloc[0] if paper and len(g) else None, "cell": spread(g[column])})
    return pd.DataFrame(rows)


def seed_rows(results: Path) -> tuple[list[str], list[list]]:
    """Header and rows: per headline claim, the paper's number and ours per truth over the seeds."""
    table = seed_spread(results)
    if table is None or table.empty:
        return [], []
    truths = [t for t in TRUTH_LABELS if t in set(table.truth)]  # the paper-measured times first, as elsewhere
    seeds = int(table.seeds.max())
    plural = "s" if seeds != 1 else ""
    header = ["claim", "paper"] + [f"ours, {TRUTH_LABELS[t]}: heuristic over {seeds} seed{plural}, mean [min, max]"
                                   for t in truths]
    rows = []
    for d, m, kind in HEADLINE_CLAIMS:
        cells = table[(table.dataset == d) & (table.model == m)].set_index("truth")
        paper = cells["paper"].iloc[0]
        paper_text = fmt_pct(paper) if kind != "llama" else "slightly shorter"
        rows.append([claim_text(d, m, kind), paper_text] + [cells.loc[t, "cell"] for t in truths])
    return header, rows


def seeds_markdown(results: Path, settings) -> str:
    """The headline claims over the seeds (a table), or a line saying the step did not run."""
    header, rows = seed_rows(results)
    if not rows:
        return "(not run)"
    seeds = ", ".join(str(s) for s in settings.seeds)
    label = "Seeds" if len(settings.seeds) > 1 else "Seed"
    return (md_table(header, rows) + f"\n\n{label} {seeds}: the same {settings.size}-sequence {settings.sampling} "
            "sample of each dataset's Table 3 bands, drawn with each seed (seed 0 is the sample every other table "
            "uses); the heuristic against the four static strategies on each (fig2_headline_seeds.csv; "
            "`paradyse-lab experiment fig2 --seed K [--truth-cost-model paper]`).")


def band_share_rows(settings) -> tuple[list[str], list[list]]:
    """Per Table 3 band: the share of each sampled dataset's sequences in it (seed 0, measured from its lengths)
    beside Table 3's."""
    header, columns = ["band"], []
    for d, (percents, _) in PAPER_DATASETS.items():
        w = get_workload(d, settings.size, 0, sampling=settings.sampling)
        header += [f"{NAMES[d]}, ours (seed 0)", f"{NAMES[d]}, Table 3"]
        columns += [w.band_fractions(), [p / sum(percents) for p in percents]]
    rows = [[b] + [f"{100 * c[i]:.1f}%" for c in columns] for i, b in enumerate(BAND_NAMES)]
    return header, rows


def band_shares_markdown(settings) -> str:
    header, rows = band_share_rows(settings)
    return md_table(header, rows)
