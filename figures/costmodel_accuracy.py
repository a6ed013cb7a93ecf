"""Cost-model accuracy: predicted against truth for time and peak memory, inside (interp) and beyond (extrap)
the profiled range, with each model's MAPE.

Produces results/figures/costmodel_accuracy.png and .pdf from results/costmodel_points.csv and
results/costmodel_accuracy.csv: `python figures/costmodel_accuracy.py --results results` (also run by
`paradyse-lab reproduce`).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run by its file path, not as a module: import this checkout's packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import matplotlib.pyplot as plt  # noqa: E402

from paradyse_lab.figures import _common  # noqa: E402

COLORS = {"analytic": "black", "hybrid": "#1f77b4", "forest": "#2ca02c", "polynomial": "#d62728",
          "residual": "#9467bd"}


def draw(args):
    pts = _common.read_csv(args.results, "costmodel_points.csv")
    acc = _common.read_csv(args.results, "costmodel_accuracy.csv")
    source = pts["source"].iloc[0] if len(pts) else "?"
    fig, axes = plt.subplots(2, 2, figsize=(10, 8.4))
    targets = (("time_s", "pred_time_s", "time_mape", "whole-model step time (s)", 1.0),
               ("peak_bytes", "pred_peak_bytes", "mem_mape", "peak memory per GPU (GiB)", _common.GiB))
    for i, (true, pred, metric, label, unit) in enumerate(targets):
        for j, split in enumerate(("interp", "extrap")):
            ax = axes[i][j]
            sub = pts[pts["split"] == split]
            for name, g in sub.groupby("cost_model", sort=False):
                m = acc[(acc["cost_model"] == name) & (acc["split"] == split)][metric]
                mape = f"{100 * m.iloc[0]:.1f}%" if len(m) else "?"
                ax.scatter(g[true] / unit, g[pred] / unit, s=7, alpha=0.6, color=COLORS.get(name, "gray"),
                           label=f"{name} (MAPE {mape})")
            lo, hi = (sub[[true, pred]] / unit).min().min(), (sub[[true, pred]] / unit).max().max()
            ax.plot([lo, hi], [lo, hi], color="gray", lw=0.8, ls="--")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(f"truth: {label}")
            ax.set_ylabel(f"predicted: {label}")
            where = "held-out lengths inside the profiled range" if split == "interp" else "up to 2x beyond it"
            ax.set_title(f"{'time' if i == 0 else 'memory'}, {split}: {where}")
            ax.grid(alpha=0.3, which="both")
            ax.legend(loc="upper left", markerscale=2)
            if split == "extrap" and {"hybrid", "polynomial"} <= set(sub["cost_model"]):
                ax.text(0.98, 0.02, "beyond the profiled range the hybrid is its polynomial:\nthe two coincide",
                        transform=ax.transAxes, ha="right", va="bottom", fontsize=7, color="#444444")
    fig.suptitle(f"Cost models against the profile (profile source={source}: analytic model + seeded noise)")
    fig.tight_layout()
    return fig


def render(results, out=None, name=None, note=_common.SOURCE_NOTE) -> Path:
    """Draw the figure from the CSVs in `results` into OUT/NAME.png and .pdf (default
    RESULTS/figures/costmodel_accuracy);
    returns OUT/NAME without extension; a missing CSV raises `_common.MissingCSV`."""
    return _common.render("costmodel_accuracy", draw, results, out, name, note)


def main(argv=None) -> int:
    return _common.run("costmodel_accuracy", draw, argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
