"""Figure 2: cumulative training time against sequence length, six panels; a curve ends where its run OOMs.

Produces results/figures/fig2_cumulative_time.png and .pdf from results/fig2_summary.csv and
results/runs/fig2/*.csv: `python figures/fig2_cumulative_time.py --results results` (after
`paradyse-lab reproduce`, which also runs this script).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run by its file path, not as a module: import this checkout's packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import matplotlib.pyplot as plt  # noqa: E402

from paradyse_lab.figures import _common  # noqa: E402


def run_csv(dataset: str, model: str, policy: str) -> str:
    """Name of a run's CSV under runs/fig2/ (as the simulator's `run_path` names it)."""
    return f"runs/fig2/{dataset}__{model}__{policy.replace(':', '-')}.csv"


def draw(args):
    summary = _common.read_csv(args.results, "fig2_summary.csv")
    datasets = list(dict.fromkeys(summary["dataset"]))
    models = list(dict.fromkeys(summary["model"]))
    policies = list(dict.fromkeys(summary["policy"]))
    fig, axes = plt.subplots(len(datasets), len(models), figsize=(4.2 * len(models), 3.3 * len(datasets)),
                             squeeze=False)
    for i, d in enumerate(datasets):
        for j, m in enumerate(models):
            ax = axes[i][j]
            for p in policies:
                rows = _common.read_columns(args.results, run_csv(d, m, p), ["seq_len", "oom", "cumulative_time_s"])
                style = dict(_common.POLICY_STYLE.get(p, dict(label=p)))
                oom_marker = style.pop("oom_marker", "x")
                trained = rows[~rows["oom"].astype(bool)]
                x, y = trained["seq_len"] / 1024, trained["cumulative_time_s"]
                # dp / ilp drawn thin and on top, so they show where they coincide with the heuristic
                ax.plot(x, y, **style, zorder={"dynamic:heuristic": 3, "dynamic:dp": 4, "dynamic:ilp": 5}.get(p, 2))
                oom = rows[rows["oom"].astype(bool)]
                if len(oom):
                    x_oom, y_end = oom["seq_len"].iloc[0] / 1024, y.iloc[-1] if len(y) else 0.0
                    color = style.get("color", "gray")
                    if len(x):  # the OOM step is the next (longer) sequence: a faint link to the curve's end
                        ax.plot([x.iloc[-1], x_oom], [y_end, y_end], color=color, lw=0.8, ls=":", alpha=0.6)
                    ax.plot(x_oom, y_end, marker=oom_marker, ms=8, mew=2, color=color, ls="none", zorder=6)
            ax.set_title(f"{_common.DATASET_LABELS.get(d, d)}, {_common.MODEL_LABELS.get(m, m)}")
            ax.set_xlabel("sequence length (K tokens, sorted run)")
            ax.set_ylabel("cumulative training time (s)")
            ax.grid(alpha=0.3)
            ax.set_xlim(left=0)
            ax.set_ylim(bottom=0)
    handles, labels = axes[0][0].get_legend_handles_labels()
    handles.append(plt.Line2D([], [], color="gray", marker="x", ls="none", ms=8, mew=2))
    labels.append("OOM (run ends)")
    if any(_common.POLICY_STYLE.get(p, {}).get("oom_marker") for p in policies):
        handles.append(plt.Line2D([], [], color="gray", marker="+", ls="none", ms=8, mew=2))
        labels.append("OOM of our series")
    ncol = min(len(labels), 8)
    rows = -(-len(labels) // ncol)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, frameon=False,
               bbox_to_anchor=(0.5, -0.04 * rows))
    fig.suptitle(f"Figure 2: cumulative training time, batch size 1 ({args.note})")
    fig.tight_layout()
    return fig


def render(results, out=None, name=None, note=_common.SOURCE_NOTE) -> Path:
    """Draw the figure from the CSVs in `results` into OUT/NAME.png and .pdf (default
    RESULTS/figures/fig2_cumulative_time);
    returns OUT/NAME without extension; a missing CSV raises `_common.MissingCSV`."""
    return _common.render("fig2_cumulative_time", draw, results, out, name, note)


def main(argv=None) -> int:
    return _common.run("fig2_cumulative_time", draw, argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
