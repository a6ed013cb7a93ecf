"""Table 5: the ablations of GPT on GRCh38, the paper's numbers beside ours (max length and time saving).

Produces results/figures/table5_ablation.png and .pdf from results/table5.csv:
`python figures/table5_ablation.py --results results` (also run by `paradyse-lab reproduce`).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run by its file path, not as a module: import this checkout's packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from paradyse_lab.figures import _common  # noqa: E402


def _label(row) -> str:
    name = row["variant"]
    for k, v in _common.STRATEGY_LABELS.items():
        name = name.replace(k, v)
    if isinstance(row.get("profile_source"), str) and row["profile_source"]:
        name += f"\n(plans: {row['plan_cost_model']}, source={row['profile_source']})"
    return name


def draw(args):
    t = _common.read_csv(args.results, "table5.csv")
    labels = [_label(r) for _, r in t.iterrows()]
    y = np.arange(len(t))
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 0.55 * len(t) + 1.6), sharey=True)
    h = 0.38
    a.barh(y - h / 2, t["paper_max_len"] / 1024, h, color="#bbbbbb", label="paper (measured)")
    a.barh(y + h / 2, t["max_len"] / 1024, h, color="#1f77b4", label="ours (simulated)")
    a.set_xlabel("longest sequence trained (K tokens)")
    a.set_yticks(y, labels)
    a.invert_yaxis()
    a.grid(axis="x", alpha=0.3)
    a.legend(loc="lower right")
    a.set_title("max trainable length")
    b.barh(y - h / 2, 100 * t["paper_saving"].fillna(0), h, color="#bbbbbb", label="paper (measured)")
    b.barh(y + h / 2, 100 * t["saving"].fillna(0), h, color="#ff7f0e", label="ours (simulated)")
    b.axvline(0, color="black", lw=0.8)
    b.set_xlabel("saving of the full system (%) = (time - time full) / time")
    b.grid(axis="x", alpha=0.3)
    b.legend(loc="lower right")
    b.set_title("time saved by the full system")
    fig.suptitle(f"Table 5: ablations, GPT on GRCh38 ({args.note})")
    fig.tight_layout()
    return fig


def render(results, out=None, name=None, note=_common.SOURCE_NOTE) -> Path:
    """Draw the figure from the CSVs in `results` into OUT/NAME.png and .pdf (default
    RESULTS/figures/table5_ablation);
    returns OUT/NAME without extension; a missing CSV raises `_common.MissingCSV`."""
    return _common.render("table5_ablation", draw, results, out, name, note)


def main(argv=None) -> int:
    return _common.run("table5_ablation", draw, argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
