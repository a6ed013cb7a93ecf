"""The figures of `paradyse-lab reproduce`: `draw_figure` renders one figures/ module from a results folder's CSVs
(`paradyse-lab experiment packing` and `experiment groups` draw with it too), and `step_figures` draws every
figure of a run into DIR/figures/, the paper-truth ones a second time from paper/."""

from __future__ import annotations

import importlib
from pathlib import Path

from paradyse_lab.app.reproduce_outputs import FIGURE_SCRIPTS, PAPER_DIR, PAPER_FIGURE_SCRIPTS
from paradyse_lab.app.reproduce_settings import FIGURE_FORMATS, Settings
from paradyse_lab.errors import UserInputError

PAPER_FIGURE_NOTE = "simulated: charged by the authors' measured A100 times (source=paper), 8x A100-80GB"


def draw_figure(module: str, results: Path, figures: Path, name: str, note: str | None,
                formats: tuple[str, ...] = FIGURE_FORMATS, label: str = "") -> list[str]:
    """Render the figure module MODULE from the CSVs under `results` into `figures`/NAME.png and .pdf (or `formats`),
    with `label` written under it when given."""
    # lazy: matplotlib: slow to load, only the figures need it
    from paradyse_lab.figures._common import SOURCE_NOTE, MissingCSV, render

    figure = importlib.import_module(f"paradyse_lab.figures.{module}")
    try:
        path = render(module, figure.draw, results, figures, name, note or SOURCE_NOTE, formats, label)
    except MissingCSV as err:
        raise UserInputError(f"figures/{module}.py: {err}") from None
    print(f"wrote {path}." + " and .".join(formats))
    return [f"figures/{name}.{ext}" for ext in formats]


def step_figures(out: Path, s: Settings, force: bool) -> list[str]:
    """Each figures/ module's drawing of the run's CSVs (`FIGURE_SCRIPTS`; `PAPER_FIGURE_SCRIPTS` again from
    paper/; groups when its CSV is there) into DIR/figures/, in `s.figure_formats`."""
    jobs = [(name, out, name, None) for name in FIGURE_SCRIPTS]
    if s.paper_truth:
        jobs += [(name, out / PAPER_DIR, f"{name}_paper", PAPER_FIGURE_NOTE) for name in PAPER_FIGURE_SCRIPTS]
    if (out / "groups.csv").exists():  # full runs only (step_groups)
        from paradyse_lab.figures.groups import NOTE

        jobs.append(("groups", out, "groups", NOTE))
    written = []
    for module, results, name, note in jobs:
        written += draw_figure(module, results, out / "figures", name, note, s.figure_formats, quick_label(s))
    return written


def quick_label(s: Settings) -> str:
    """The line every figure of a `reproduce --quick` run carries under it (its numbers come from smaller samples
    than the full run's and must not be read as the full run's); '' for a full run."""
    if not s.quick:
        return ""
    return f"QUICK run (reproduce --quick: {s.size} sequences per dataset), not the full reproduction"
