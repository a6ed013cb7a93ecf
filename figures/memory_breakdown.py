"""Memory per GPU of each uniform plan: model states, activations kept for backward, and the largest
transient working set, against sequence length, per model and strategy.

Produces results/figures/memory_breakdown.png and .pdf from results/memory_breakdown.csv:
`python figures/memory_breakdown.py --results results` (also run by `paradyse-lab reproduce`).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run by its file path, not as a module: import this checkout's packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import matplotlib.pyplot as plt  # noqa: E402

from paradyse_lab.figures import _common  # noqa: E402

PARTS = (("model_state_bytes", "model states (weights, grads, Adam)", "#7f7f7f"),
         ("kept_bytes", "activations kept for backward", "#1f77b4"),
         ("transient_bytes", "largest transient", "#ff7f0e"))


def draw(args):
    df = _common.read_csv(args.results, "memory_breakdown.csv")
    models = list(dict.fromkeys(df["model"]))
    strategies = list(dict.fromkeys(df["strategy"]))
    fig, axes = plt.subplots(len(models), len(strategies), figsize=(3.1 * len(strategies), 2.5 * len(models)),
                             squeeze=False, sharex=True)
    for i, m in enumerate(models):
        top = df[df["model"] == m]["budget_bytes"].max() / _common.GiB * 1.6
        for j, s in enumerate(strategies):
            ax = axes[i][j]
            g = df[(df["model"] == m) & (df["strategy"] == s)].sort_values("seq_len")
            x = g["seq_len"] / 1024
            ax.stackplot(x, *[g[c] / _common.GiB for c, _, _ in PARTS], colors=[c for _, _, c in PARTS],
                         labels=[lab for _, lab, _ in PARTS], alpha=0.85)
            ax.axhline(g["budget_bytes"].iloc[0] / _common.GiB, color="black", lw=1, ls="--", label="usable memory")
            ax.set_xscale("log", base=2)
            ax.set_xticks([1, 4, 16, 64, 256], ["1", "4", "16", "64", "256"])
            ax.set_ylim(0, top)
            ax.set_title(f"{_common.MODEL_LABELS.get(m, m)}, {_common.STRATEGY_LABELS.get(s, s)}")
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel("GiB per GPU")
            if i == len(models) - 1:
                ax.set_xlabel("sequence length (K tokens)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False, bbox_to_anchor=(0.5, -0.03))
    fig.suptitle(f"Peak memory of one strategy on every layer ({_common.SOURCE_NOTE})")
    fig.tight_layout()
    return fig


def render(results, out=None, name=None, note=_common.SOURCE_NOTE) -> Path:
    """Draw the figure from the CSVs in `results` into OUT/NAME.png and .pdf (default
    RESULTS/figures/memory_breakdown);
    returns OUT/NAME without extension; a missing CSV raises `_common.MissingCSV`."""
    return _common.render("memory_breakdown", draw, results, out, name, note)


def main(argv=None) -> int:
    return _common.run("memory_breakdown", draw, argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
