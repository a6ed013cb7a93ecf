"""Groups sized per step: tokens per second of each series over ParaDySe's, per panel and node count.

Produces results/figures/groups.png and .pdf from results/groups.csv: `python figures/groups.py --results
results` (also drawn by `paradyse-lab experiment groups`). One row per dataset, one column per model; in each
panel a group of bars per node count, one bar per series (ParaDySe = 1); the number over a bar is its tokens
per second relative to ParaDySe. Every bar carries a gid `dataset|model|nodes|series`, read back by the test.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run by its file path, not as a module: import this checkout's packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from paradyse_lab.figures import _common  # noqa: E402

SERIES_COLORS = {"ParaDySe": "black", "ours": "#d62728", "Megatron": "#1f77b4", "smallest-fit CP": "#9ecae1",
                 "best static": "#7f7f7f"}
NOTE = "simulated: analytic cost model; A100-80GB nodes (BERT, LLaMA, GPT), H100 nodes (llama3-8b)"


def draw(args):
    t = _common.read_csv(args.results, "groups.csv")
    datasets, models = list(dict.fromkeys(t["dataset"])), list(dict.fromkeys(t["model"]))
    nodes, series = sorted(set(int(n) for n in t["nodes"])), list(dict.fromkeys(t["series"]))
    fig, axes = plt.subplots(len(datasets), len(models), figsize=(3.6 * len(models), 2.9 * len(datasets)),
                             squeeze=False)
    width = 0.8 / len(series)
    for i, d in enumerate(datasets):
        for j, m in enumerate(models):
            ax = axes[i][j]
            panel = t[(t["dataset"] == d) & (t["model"] == m)]
            for q, s in enumerate(series):
                for x, n in enumerate(nodes):
                    r = panel[(panel["nodes"] == n) & (panel["series"] == s)]
                    if r.empty:
                        continue
                    value = float(r["vs_paradyse"].iloc[0])
                    bars = ax.bar(x - 0.4 + (q + 0.5) * width, value, width, color=SERIES_COLORS.get(s, "gray"),
                                  label=s if x == 0 else None)
                    bars[0].set_gid(f"{d}|{m}|{n}|{s}")
                    if s == "ours":
                        ax.text(bars[0].get_x() + width / 2, value, f"{value:.2f}", fontsize=6, ha="center",
                                va="bottom")
            ax.axhline(1.0, color="black", lw=0.6, ls=":")
            ax.set_xticks(np.arange(len(nodes)), [f"{n} node{'s' if n > 1 else ''}" for n in nodes])
            ax.set_ylabel("tokens/s over ParaDySe")
            ax.grid(axis="y", alpha=0.3)
            ax.set_title(f"{_common.DATASET_LABELS.get(d, d)}, {_common.MODEL_LABELS.get(m, m)}")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False, bbox_to_anchor=(0.5, -0.04))
    fig.suptitle(f"Global batches over groups sized per step ({args.note})")
    fig.tight_layout()
    return fig


def render(results, out=None, name=None, note=NOTE) -> Path:
    """Draw the figure from results/groups.csv into OUT/NAME.png and .pdf (default RESULTS/figures/groups)."""
    return _common.render("groups", draw, results, out, name, note)


def main(argv=None) -> int:
    return _common.run("groups", draw, argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
