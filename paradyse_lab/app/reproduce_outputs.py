"""Where `paradyse-lab reproduce` writes: the folders under DIR, the figures each run draws, and the files of
every step (`STEP_OUTPUTS`, `step_outputs`), which the stamps cover and a finished step is reused by."""

from __future__ import annotations

from paradyse_lab.app.reproduce_settings import FIGURE_FORMATS, Settings
from paradyse_lab.results.timings import TIMINGS_DIR

PAPER_DIR = "paper"
"""The paper-truth steps' folder under DIR (charged by the authors' measured A100 times)."""
SWITCH_MEMORY_DIR = "switch-memory"
SEEDS_DIR = "seeds"
HEADLINE_SEEDS_FILE = "fig2_headline_seeds.csv"
FIGURE_SCRIPTS = ("fig2_cumulative_time", "table5_ablation", "solver_quality", "costmodel_accuracy", "plan_map",
                  "memory_breakdown", "packing")
PAPER_FIGURE_SCRIPTS = ("fig2_cumulative_time", "table5_ablation", "packing")
"""Drawn a second time from paper/ as NAME_paper.png."""


def figure_files(formats: tuple[str, ...]) -> tuple[str, ...]:
    """Every figure's file, relative to the output folder, in each of `formats`."""
    return tuple(f"figures/{n}.{e}" for n in FIGURE_SCRIPTS for e in formats)


STEP_OUTPUTS = {"fig2": ("fig2_summary.csv", "fig2_headline.csv", "fig2_beyond.csv", "solver_quality_runs.csv",
                         f"{TIMINGS_DIR}/fig2_summary.csv", f"{TIMINGS_DIR}/solver_quality_runs.csv"),
                "table5": ("table5.csv",), "solvers": ("solver_bench.csv", f"{TIMINGS_DIR}/solver_bench.csv"),
                "fig2_paper": (f"{PAPER_DIR}/fig2_summary.csv", f"{PAPER_DIR}/fig2_headline.csv",
                               f"{PAPER_DIR}/fig2_beyond.csv", f"{PAPER_DIR}/{TIMINGS_DIR}/fig2_summary.csv"),
                "table5_paper": (f"{PAPER_DIR}/table5.csv",), "seeds": (HEADLINE_SEEDS_FILE,),
                "packing": ("packing.csv", f"{PAPER_DIR}/packing.csv"),
                "groups": ("groups.csv", f"{TIMINGS_DIR}/groups.csv"),
                "switch_memory": tuple(f"{SWITCH_MEMORY_DIR}/{t}/{f}" for t in ("analytic", "paper")
                                       for f in ("fig2_summary.csv", "table5.csv", f"{TIMINGS_DIR}/fig2_summary.csv")),
                "costmodel": ("costmodel_points.csv", "costmodel_accuracy.csv"),
                "costmodel_paper": ("costmodel_paper_accuracy.csv", "calibration_loso.csv", "calibration_params.csv"),
                "plan_map": ("plan_map.csv",), "memory": ("memory_breakdown.csv",),
                "two_d": ("two_d.csv",),
                "figures": figure_files(FIGURE_FORMATS)}
"""Steps whose outputs, once present (with the same settings and code, unchanged), are reused; the figures
also need every CSV they read unchanged; the report is always rewritten. A quick run's figures are the PNGs
alone (`QUICK_FIGURE_FORMATS`; `step_outputs`)."""


def step_outputs(name: str, s: Settings) -> tuple[str, ...]:
    """The files step `name` writes under settings `s` (`STEP_OUTPUTS`, a quick run's figures PNG alone)."""
    if name == "figures":
        return figure_files(s.figure_formats)
    return STEP_OUTPUTS.get(name, ())
