"""Solver quality: heuristic, greedy, ilp against the exact dp (gap) and solve time against layers.

Produces results/figures/solver_quality.png and .pdf from results/solver_bench.csv and
results/solver_quality_runs.csv: `python figures/solver_quality.py --results results` (also run by
`paradyse-lab reproduce`).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run by its file path, not as a module: import this checkout's packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from paradyse_lab.figures import _common  # noqa: E402

COLORS = {"heuristic": "black", "greedy": "#bcbd22", "dp": "#e377c2", "ilp": "#17becf", "brute_force": "#7f7f7f"}
MARKERS = {"random": "o", "random+switch": "s", "model": "^", "model-sublayer": "v"}


def draw(args):
    b = _common.read_csv(args.results, "solver_bench.csv")
    q = _common.read_csv(args.results, "solver_quality_runs.csv")
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(13, 3.8))
    for (solver, kind), g in b.groupby(["solver", "kind"], sort=False):
        g = g.groupby("layers", as_index=False)[["max_gap_pct", "median_ms"]].max()
        style = dict(color=COLORS.get(solver, "gray"), marker=MARKERS.get(kind, "o"), ms=4, lw=1.2)
        if solver not in ("dp", "brute_force"):
            a1.plot(g["layers"], g["max_gap_pct"], **style)
        a2.plot(g["layers"], g["median_ms"], **style)
    a1.set_xscale("log", base=2)
    a1.set_xlabel("decisions L (layers or sub-layers)")
    a1.set_ylabel("worst gap to the optimum (%)")
    a1.set_title("(a) plan time above dp's optimum")
    a2.set_xscale("log", base=2)
    a2.set_yscale("log")
    a2.set_xlabel("decisions L (layers or sub-layers)")
    a2.set_ylabel("median solve time (ms)")
    a2.set_title("(b) solve time")
    layers = sorted(set(b["layers"]))
    for ax in (a1, a2):
        ax.grid(alpha=0.3, which="both")
        ax.set_xticks(layers, [str(v) for v in layers])
        ax.minorticks_off() if ax is a1 else None
    solvers = [s for s in COLORS if s in set(b["solver"])]
    kinds = [k for k in MARKERS if k in set(b["kind"])]
    handles = [plt.Line2D([], [], color=COLORS[s], lw=2) for s in solvers]
    handles += [plt.Line2D([], [], color="gray", marker=MARKERS[k], ls="none") for k in kinds]
    a1.legend(handles, solvers + [f"problems: {k}" for k in kinds], loc="upper left", fontsize=7)
    labels = [f"{_common.DATASET_LABELS.get(d, d)}\n{_common.MODEL_LABELS.get(m, m)}"
              for d, m in dict.fromkeys(zip(q["dataset"], q["model"]))]
    x = np.arange(len(labels))
    for k, (policy, g) in enumerate(q.groupby("policy", sort=False)):
        name = policy.split(":")[-1]
        a3.bar(x + (k - 0.5) * 0.38, 100 * g["gap_to_dp"].fillna(0), 0.38, color=COLORS.get(name, "gray"), label=name)
    a3.set_xticks(x, labels, fontsize=7, rotation=30)
    if q["gap_to_dp"].fillna(0).abs().max() < 1e-9:
        a3.text(0.5, 0.5, "gap 0 on every panel:\nheuristic, ilp and dp train\nequally fast", ha="center",
                va="center", transform=a3.transAxes, bbox=dict(fc="white", ec="none"))
    a3.axhline(0, color="black", lw=0.8)
    a3.set_ylabel("cumulative time above dp's run (%)")
    a3.set_title("(c) on Figure 2's runs (cache + smoothing)")
    a3.legend()
    a3.grid(axis="y", alpha=0.3)
    fig.suptitle("Solver quality (problems priced by the analytic cost model, source=analytic)")
    fig.tight_layout()
    return fig


def render(results, out=None, name=None, note=_common.SOURCE_NOTE) -> Path:
    """Draw the figure from the CSVs in `results` into OUT/NAME.png and .pdf (default
    RESULTS/figures/solver_quality);
    returns OUT/NAME without extension; a missing CSV raises `_common.MissingCSV`."""
    return _common.render("solver_quality", draw, results, out, name, note)


def main(argv=None) -> int:
    return _common.run("solver_quality", draw, argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
