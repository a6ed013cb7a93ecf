"""Measured against predicted cumulative training time per policy, from `paradyse-lab validate-run`.

Produces DIR/figures/validate_run.png and .pdf from DIR/validate_run.csv and DIR/validate_run_summary.csv:
`python figures/validate_run.py --results DIR --out DIR/figures` (validate-run runs it). Solid: measured on
the machine that ran the steps; dashed: the simulator's prediction of the same steps. Left: cumulative
time against step; right: each policy's predicted total over its measured total.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run by its file path, not as a module: import this checkout's packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import matplotlib.pyplot as plt  # noqa: E402

from paradyse_lab.figures import _common  # noqa: E402


def draw(args):
    steps = _common.read_csv(args.results, "validate_run.csv")
    summary = _common.read_csv(args.results, "validate_run_summary.csv")
    steps = steps[steps["counted"].astype(bool)]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [2, 1]})
    for policy, g in steps.groupby("policy", sort=False):
        style = dict(_common.POLICY_STYLE.get(policy, dict(label=policy)))
        label = style.pop("label", policy)
        style.pop("ls", None)
        ax.plot(g["step"], g["measured_cum_s"], ls="-", label=f"{label} measured", **style)
        ax.plot(g["step"], g["predicted_cum_s"], ls="--", label=f"{label} predicted", **style)
    ax.set_xlabel("step (lengths ascending)")
    ax.set_ylabel("cumulative step time (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    ratio = summary["predicted_total_s"] / summary["measured_total_s"]
    colors = [_common.POLICY_STYLE.get(p, {}).get("color", "gray") for p in summary["policy"]]
    bx.barh(summary["policy"], ratio, color=colors)
    bx.axvline(1.0, color="black", lw=0.8)
    bx.set_xlabel("predicted total / measured total")
    bx.invert_yaxis()
    bx.grid(alpha=0.3, axis="x")
    fig.suptitle("validate-run: executed (measured on this machine) vs simulated, same lengths and cost model")
    fig.tight_layout()
    return fig


def render(results, out=None, name=None, note=_common.SOURCE_NOTE, formats=_common.FORMATS) -> Path:
    """Draw the figure from the CSVs in `results` into OUT/NAME.png and .pdf (OUT/NAME by default
    RESULTS/figures/validate_run), or into the `formats` given;
    returns OUT/NAME without extension; a missing CSV raises `_common.MissingCSV`."""
    return _common.render("validate_run", draw, results, out, name, note, formats)


def main(argv=None) -> int:
    return _common.run("validate_run", draw, argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
