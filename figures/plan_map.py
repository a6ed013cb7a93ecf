"""Plan map: the strategy each layer gets at each sequence length, for the heuristic (the paper's) and dp.

Produces results/figures/plan_map.png and .pdf from results/plan_map.csv:
`python figures/plan_map.py --results results` (also run by `paradyse-lab reproduce`).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run by its file path, not as a module: import this checkout's packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from paradyse_lab.figures import _common  # noqa: E402


def draw(args):
    df = _common.read_csv(args.results, "plan_map.csv")
    names = list(_common.STRATEGY_COLORS) + ["OOM"]
    colors = list(_common.STRATEGY_COLORS.values()) + ["#dddddd"]
    code = {n: i for i, n in enumerate(names)}
    panels = list(dict.fromkeys(zip(df["model"], df["solver"])))
    models = list(dict.fromkeys(df["model"]))
    solvers = list(dict.fromkeys(df["solver"]))
    fig, axes = plt.subplots(len(models), len(solvers), figsize=(5.4 * len(solvers), 2.6 * len(models)),
                             squeeze=False)
    for model, solver in panels:
        ax = axes[models.index(model)][solvers.index(solver)]
        g = df[(df["model"] == model) & (df["solver"] == solver)]
        grid = g.pivot(index="layer", columns="seq_len", values="strategy")
        lens = list(grid.columns)
        z = np.vectorize(lambda s: code.get(s.split("+")[0], len(names) - 1))(grid.to_numpy())
        ax.imshow(z, aspect="auto", cmap=ListedColormap(colors), vmin=-0.5, vmax=len(names) - 0.5,
                  interpolation="nearest", origin="lower")
        ticks = np.linspace(0, len(lens) - 1, min(8, len(lens))).round().astype(int)
        ax.set_xticks(ticks, [f"{lens[t] / 1024:.0f}" for t in ticks])
        ax.set_yticks(range(len(grid.index)), [str(i) for i in grid.index] if len(grid.index) <= 12 else None)
        ax.set_xlabel("sequence length (K tokens)")
        ax.set_ylabel("layer")
        label = "heuristic (ParaDySe)" if solver == "heuristic" else f"{solver} (exact)"
        ax.set_title(f"{_common.MODEL_LABELS.get(model, model)}: {label}")
    handles = [Patch(color=c, label=_common.STRATEGY_LABELS.get(n, "no plan fits (OOM)"))
               for n, c in zip(names, colors)]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, bbox_to_anchor=(0.5, -0.05))
    fig.suptitle(f"Strategy per layer and length (no cache or smoothing; {_common.SOURCE_NOTE})")
    fig.tight_layout()
    return fig


def render(results, out=None, name=None, note=_common.SOURCE_NOTE) -> Path:
    """Draw the figure from the CSVs in `results` into OUT/NAME.png and .pdf (default
    RESULTS/figures/plan_map);
    returns OUT/NAME without extension; a missing CSV raises `_common.MissingCSV`."""
    return _common.render("plan_map", draw, results, out, name, note)


def main(argv=None) -> int:
    return _common.run("plan_map", draw, argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
