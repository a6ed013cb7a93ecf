"""The reproduction's table of the strategies beyond the paper's four on one 8-GPU node: what its rows say, how
REPORT.md shows them, and that docs/results.md prints what they are."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from paradyse_lab.app.report.two_d import two_d_section
from paradyse_lab.app.reproduce_planner_steps import step_two_d, two_d_rows
from paradyse_lab.app.reproduce_settings import Settings

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results.md"


@pytest.fixture(scope="module")
def quick_rows() -> pd.DataFrame:
    return pd.DataFrame(two_d_rows(quick=True))


def test_gpt2_xl_gets_the_uneven_head_split_and_a_faster_step(quick_rows):
    rows = quick_rows[quick_rows.model == "gpt2-xl"]
    assert list(rows.step) == ["1K (its positions)"] * 2  # 1,024 learned positions: no 8K or 128K step
    four, more = (rows[rows.series == s].iloc[0] for s in ("paper's four", "+ 2-D and uneven heads"))
    assert "megatron_cz" in four.options.split() and "ulysses_uneven" in more.options.split()
    assert more.predicted_time_s < four.predicted_time_s


def test_the_results_page_prints_the_rows_as_they_are(quick_rows, tmp_path):
    quick_rows.to_csv(tmp_path / "two_d.csv", index=False)
    page = RESULTS.read_text(encoding="utf-8")
    lines = [x for x in two_d_section(tmp_path).splitlines() if x.startswith("| ") and "model" not in x]
    assert len(lines) == 5 and all(line in page for line in lines)


def test_the_step_writes_the_csv_and_the_report_shows_both_series(tmp_path, monkeypatch):
    monkeypatch.setattr("paradyse_lab.app.reproduce_planner_steps.TWO_D_MODELS", ("gpt2-xl",))
    assert two_d_section(tmp_path).startswith("Not run")
    assert step_two_d(tmp_path, Settings.make(quick=True), force=False) == ["two_d.csv"]
    line = next(x for x in two_d_section(tmp_path).splitlines() if x.startswith("| gpt2-xl"))
    assert "(megatron_cz megatron_ts)" in line and "(ulysses_uneven megatron_ts)" in line and line.endswith("% |")
