"""Shared by the figure scripts: arguments, reading CSVs (a missing one is exit 2 with one line), saving.

Not a figure itself. figures/ is a package: each figure module has `render(results, out, name, note)`
(what `paradyse-lab reproduce` calls) and `main(argv)` (what running a figure's file with `--results DIR` runs).
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.layout_engine import PlaceHolderLayoutEngine  # noqa: E402

from paradyse_lab.core.strategies import CATALOG, USABLE  # noqa: E402
from paradyse_lab.files.atomic_write import write_bytes_atomic  # noqa: E402
from paradyse_lab.results.timings import read_with_timings  # noqa: E402

STRATEGY_LABELS = {name: CATALOG[name].paper_name for name in USABLE}
"""Legend label of each usable strategy, from its catalog entry, in the paper's order."""
STRATEGY_COLORS = {name: CATALOG[name].color for name in USABLE}
"""Colour of each usable strategy, from its catalog entry, in the paper's order."""
POLICY_STYLE = {
    **{f"static:{k}": dict(color=c, lw=1.6, ls="-", label=STRATEGY_LABELS[k]) for k, c in STRATEGY_COLORS.items()},
    "dynamic:heuristic": dict(color="black", lw=2.4, ls="-", label="ParaDySe (heuristic)"),
    "dynamic:dp": dict(color="#e377c2", lw=1.3, ls=(0, (4, 3)), label="dp (ours, exact)"),
    "dynamic:ilp": dict(color="#17becf", lw=1.3, ls=(3, (2, 5)), label="ilp (ours, exact)"),
    # beyond the paper: other line styles and OOM markers (+), so the paper's five curves read as before
    "dynamic:dp+recompute": dict(color="#9467bd", lw=1.3, ls="-.", label="dp + recompute (ours)", oom_marker="+"),
    "dynamic:dp+recompute+sublayer": dict(color="#8c564b", lw=1.3, ls=(0, (1, 1.5)), oom_marker="+",
                                          label="dp + recompute + sub-layer (ours)"),
    "dynamic:dp+recompute+tiled+offload+sublayer": dict(color="#bcbd22", lw=1.3, ls=(0, (5, 1, 1, 1, 1, 1)),
                                                        oom_marker="+",
                                                        label="+ tiled MLP + offload (ours)"),
    **{f"static:{k}+recompute": dict(color=c, lw=0.9, ls=(0, (6, 2)), alpha=0.7, oom_marker="+",
                                     label=f"{STRATEGY_LABELS[k]} + recompute") for k, c in STRATEGY_COLORS.items()},
}
DATASET_LABELS = {"github_code": "GitHubCode", "grch38": "GRCh38"}
MODEL_LABELS = {"bert": "BERT", "llama": "LLaMA", "gpt": "GPT"}
SOURCE_NOTE = "simulated: analytic cost model (source=analytic), 8x A100-80GB"
GiB = 2**30
FORMATS = ("png", "pdf")
"""The files a figure is saved as (`render`)."""
TITLE_Y = 1.0
"""Where each axes' title sits (axes coordinates, `axes.titley`): just above the axes, where matplotlib's automatic
placement puts it unless x tick labels, the x label or a y offset text lie above the axes (these figures keep them
below or have none). Given, the title is not placed again at each layout, bounding-box and drawing pass, each of
which measured the y axis's tick labels of every axes to place it (about a tenth of a figure's time)."""


class MissingCSV(Exception):
    """A CSV the figure reads is not there."""


def parse_args(argv, description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--results", default="results", help="folder with the CSVs (default results/)")
    p.add_argument("--out", default=None, help="folder for the PNG and PDF (default RESULTS/figures/)")
    p.add_argument("--name", default=None, help="file name of the figure, without extension (default the script's)")
    p.add_argument("--note", default=SOURCE_NOTE, help=f"where the numbers come from, in the title ({SOURCE_NOTE!r})")
    args = p.parse_args(argv)
    args.results = Path(args.results)
    args.out = Path(args.out) if args.out else args.results / "figures"
    return args


def _existing(results: Path, name: str) -> Path:
    """RESULTS/NAME, or `MissingCSV` when it is not there."""
    path = Path(results) / name
    if not path.is_file():
        raise MissingCSV(f"{path} not found; run `paradyse-lab reproduce` (or `--quick`) first")
    return path


def read_csv(results: Path, name: str) -> pd.DataFrame:
    """RESULTS/NAME with its measured columns from RESULTS/timings/NAME beside."""
    return read_with_timings(_existing(results, name))


def read_columns(results: Path, name: str, columns: list[str]) -> pd.DataFrame:
    """`columns` of RESULTS/NAME alone (no measured columns joined: a figure drawing many runs reads each fast);
    a missing file raises `MissingCSV` as `read_csv` does."""
    return pd.read_csv(_existing(results, name), usecols=columns)


def render(script: str, draw, results, out=None, name=None, note: str = SOURCE_NOTE,
           formats: tuple[str, ...] = FORMATS, label: str = "") -> Path:
    """draw(args) -> figure, saved as OUT/NAME.png and .pdf, or the `formats` given (atomically; OUT defaults
    to RESULTS/figures, NAME to `script`; a file of another of `FORMATS` left there is removed, so no figure
    of an older run stays beside it), with `label` (e.g. a quick run's) written under it; returns OUT/NAME. A
    missing CSV raises `MissingCSV`."""
    results = Path(results)
    args = argparse.Namespace(results=results, out=Path(out) if out else results / "figures", name=name, note=note)
    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 8,
                         "axes.titley": TITLE_Y, "savefig.bbox": "tight"})
    fig = draw(args)
    if label:
        fig.text(0.5, 0.0, label, ha="center", va="top", fontsize=9, color="darkred")
    name = name or script
    bbox = tight_bbox(fig)
    for ext in formats:  # rendered in memory, then renamed into place: no reader sees half a figure
        buffer = io.BytesIO()
        fig.savefig(buffer, format=ext, dpi=150, bbox_inches=bbox)
        write_bytes_atomic(args.out / f"{name}.{ext}", buffer.getvalue())
    for ext in set(FORMATS) - set(formats):
        (args.out / f"{name}.{ext}").unlink(missing_ok=True)
    plt.close(fig)
    return args.out / name


def tight_bbox(fig):
    """The figure's tight bounding box in inches, padded by `savefig.pad_inches`: what `savefig(bbox_inches=
    "tight")` computes with a layout pass of its own before each format's drawing, computed here once for
    every format (matplotlib backend_bases.py `print_figure`). A figure laid out by `tight_layout()` (every
    figure here: the layout is done, and the engine it leaves behind is a placeholder) loses the placeholder,
    with which `savefig` would draw the whole figure once more, to lay it out, before drawing it into the
    file; its bounding box needs no drawing of its own either. A figure with a layout engine of its own is
    drawn first (the engine lays it out at draw time)."""
    if isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):
        fig.set_layout_engine(None)
    elif fig.get_layout_engine() is not None:
        fig.draw_without_rendering()
    pad = plt.rcParams["savefig.pad_inches"]
    return fig.get_tightbbox(fig.canvas.get_renderer()).padded(pad, pad)


def run(script: str, draw, argv, description: str) -> int:
    """Command line of a figure module: parse args, `render`, print what it wrote; a missing CSV -> one line,
    exit 2."""
    args = parse_args(argv, description)
    try:
        path = render(script, draw, args.results, args.out, args.name, args.note)
    except MissingCSV as err:
        print(f"figures/{script}.py: error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {path}.png and .pdf")
    return 0
