"""The reproduction's table of the strategies beyond the paper's four on one 8-GPU node: what its rows say and how
REPORT.md shows them."""

from __future__ import annotations

import pandas as pd

from paradyse_lab.app.report.two_d import two_d_section
from paradyse_lab.app.reproduce_planner_steps import step_two_d, two_d_rows
from paradyse_lab.app.reproduce_settings import Settings


def test_gpt2_xl_gets_the_uneven_head_split_and_a_faster_step():
    rows = pd.DataFrame(two_d_rows(quick=True, models=("gpt2-xl",)))
    assert list(rows.step) == ["1K (its positions)"] * 2  # 1,024 learned positions: no 8K or 128K step
    four, more = (rows[rows.series == s].iloc[0] for s in ("paper's four", "+ 2-D and uneven heads"))
    assert "megatron_cz" in four.options.split() and "ulysses_uneven" in more.options.split()
    assert more.predicted_time_s < four.predicted_time_s


def test_the_step_writes_the_csv_and_the_report_shows_both_series(tmp_path, monkeypatch):
    monkeypatch.setattr("paradyse_lab.app.reproduce_planner_steps.TWO_D_MODELS", ("gpt2-xl",))
    assert two_d_section(tmp_path).startswith("Not run")
    assert step_two_d(tmp_path, Settings.make(quick=True), force=False) == ["two_d.csv"]
    table = two_d_section(tmp_path)
    line = next(x for x in table.splitlines() if x.startswith("| gpt2-xl"))
    assert "(megatron_cz megatron_ts)" in line and "(ulysses_uneven megatron_ts)" in line and line.endswith("% |")
