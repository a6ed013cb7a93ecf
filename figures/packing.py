"""Packing: time per token and longest document trained, one sequence per step against packed steps.

Produces results/figures/packing.png and .pdf from results/packing.csv: `python figures/packing.py --results
results` (also drawn by `paradyse-lab experiment packing` and `paradyse-lab reproduce`). One column per model; per
dataset a row of time per token (µs) and a row of the longest document trained (K tokens); in each panel a
group of bars per step size (one sequence per step, then each token budget), one bar per policy. A hatched
bar is a run that stopped at an out-of-memory step before the end of its dataset: its time per token is
over fewer, shorter documents. Every bar carries a gid `metric|dataset|model|pack_tokens|policy`, which the
content test reads back against the CSV.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run by its file path, not as a module: import this checkout's packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from paradyse_lab.figures import _common  # noqa: E402

METRICS = (("time_per_token_us", "time per token (µs)", 1.0), ("max_doc_trained", "longest document (K tokens)",
                                                                 1 / 1024))
"""(CSV column, axis label, scale) of each row of panels."""


def pack_label(tokens: int) -> str:
    return "1 sequence\nper step" if not tokens else f"packed\n{tokens // 1024}K tokens"


def draw(args):
    t = _common.read_csv(args.results, "packing.csv")
    datasets = list(dict.fromkeys(t["dataset"]))
    models = list(dict.fromkeys(t["model"]))
    packs = sorted(set(int(x) for x in t["pack_tokens"]))
    policies = list(dict.fromkeys(t["policy"]))
    rows = len(datasets) * len(METRICS)
    fig, axes = plt.subplots(rows, len(models), figsize=(4.6 * len(models), 2.7 * rows), squeeze=False)
    width = 0.8 / len(policies)
    for i, d in enumerate(datasets):
        for k, (column, label, scale) in enumerate(METRICS):
            for j, m in enumerate(models):
                ax = axes[i * len(METRICS) + k][j]
                panel = t[(t["dataset"] == d) & (t["model"] == m)]
                for q, p in enumerate(policies):
                    style = _common.POLICY_STYLE.get(p, {})
                    for x, b in enumerate(packs):
                        r = panel[(panel["pack_tokens"] == b) & (panel["policy"] == p)]
                        if r.empty:
                            continue
                        r = r.iloc[0]
                        value = float(r[column]) * scale if r[column] == r[column] else 0.0
                        bars = ax.bar(x - 0.4 + (q + 0.5) * width, value, width, color=style.get("color", "gray"),
                                      hatch="" if bool(r["finished"]) else "///", edgecolor="white", lw=0.3,
                                      label=style.get("label", p) if x == 0 else None)
                        bars[0].set_gid(f"{column}|{d}|{m}|{b}|{p}")
                        if not value:  # not a single step trained: its first step ran out of memory
                            ax.text(bars[0].get_x() + width / 2, 0, "OOM", rotation=90, fontsize=6,
                                    ha="center", va="bottom", color=style.get("color", "gray"))
                ax.set_xticks(np.arange(len(packs)), [pack_label(b) for b in packs])
                ax.set_ylabel(label)
                ax.grid(axis="y", alpha=0.3)
                ax.set_title(f"{_common.DATASET_LABELS.get(d, d)}, {_common.MODEL_LABELS.get(m, m)}")
    handles, labels = axes[0][0].get_legend_handles_labels()
    handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="lightgray", hatch="///", edgecolor="white"))
    labels.append("stopped at an OOM step")
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 7), frameon=False,
               bbox_to_anchor=(0.5, -0.03))
    fig.suptitle(f"Packing documents into steps ({args.note})")
    fig.tight_layout()
    return fig


def render(results, out=None, name=None, note=_common.SOURCE_NOTE) -> Path:
    """Draw the figure from the CSVs in `results` into OUT/NAME.png and .pdf (default RESULTS/figures/packing);
    returns OUT/NAME without extension; a missing CSV raises `_common.MissingCSV`."""
    return _common.render("packing", draw, results, out, name, note)


def main(argv=None) -> int:
    return _common.run("packing", draw, argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
