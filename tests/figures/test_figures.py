"""`paradyse-lab reproduce --quick` (one run per module) and every figures/ script on its CSVs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from paradyse_lab.app.reproduce import FIGURE_SCRIPTS, PAPER_FIGURE_SCRIPTS, STEP_OUTPUTS, reproduce

ROOT = Path(__file__).resolve().parents[2]
CSVS = {"fig2_cumulative_time": "fig2_summary.csv", "table5_ablation": "table5.csv",
        "solver_quality": "solver_bench.csv", "costmodel_accuracy": "costmodel_points.csv",
        "plan_map": "plan_map.csv", "memory_breakdown": "memory_breakdown.csv"}


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reproduce")
    reproduce(out, quick=True, progress=False, log=lambda m: None)
    return out


def test_reproduce_writes_csvs_figures_and_report(quick_results):
    for outputs in STEP_OUTPUTS.values():
        for name in outputs:
            assert (quick_results / name).stat().st_size > 0, name
    report = (quick_results / "REPORT.md").read_text()
    for needle in ("89.29%", "181.22%", "Table 5", "source=analytic", "figures/fig2_cumulative_time.png",
                   "source=paper", "ours, paper-measured times: heuristic", "ours max len, analytic model",
                   "figures/fig2_cumulative_time_paper.png", "Leave one shape out", "memory price of switching",
                   "Beyond the paper", "dp + recompute trains the whole dataset"):
        assert needle in report
    for name in FIGURE_SCRIPTS + tuple(f"{n}_paper" for n in PAPER_FIGURE_SCRIPTS):  # each script's main()
        for ext in ("png", "pdf"):
            assert (quick_results / "figures" / f"{name}.{ext}").stat().st_size > 1000
    beyond = pd.read_csv(quick_results / "fig2_beyond.csv")
    assert beyond.groupby(["dataset", "model"]).size().eq(5).all()
    gpt = beyond.query("dataset == 'grch38' and model == 'gpt'").set_index("series")
    assert gpt.loc["dp + recompute", "max_seq_len_trained"] > gpt.loc["ParaDySe (heuristic)", "max_seq_len_trained"]


def test_reproduce_resumes_without_rerunning(quick_results):
    timings = reproduce(quick_results, quick=True, progress=False, log=lambda m: None)
    assert all(timings[step] == 0.0 for step in STEP_OUTPUTS)


@pytest.mark.parametrize("name", FIGURE_SCRIPTS)
def test_missing_csv_is_one_line_and_exit_2(quick_results, tmp_path, name):
    results = tmp_path / "results"
    shutil.copytree(quick_results, results, ignore=shutil.ignore_patterns("figures"))
    (results / CSVS[name]).unlink()
    proc = subprocess.run([sys.executable, str(ROOT / "figures" / f"{name}.py"), "--results", str(results)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and CSVS[name] in lines[0] and "not found" in lines[0]
    assert not (results / "figures" / f"{name}.png").exists()
