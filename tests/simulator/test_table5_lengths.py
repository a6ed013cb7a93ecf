"""Table 5's lengths: on a fine grid (every multiple of the layout unit tried) and with the paper's lengths added."""

from __future__ import annotations

import json
from functools import partial

import pandas as pd

from paradyse_lab.cli import main
from paradyse_lab.simulator import ablation_experiment, run_reach
from paradyse_lab.simulator.experiments import PAPER_POLICY, Setup
from paradyse_lab.simulator.experiments import run_planner as planner_of
from paradyse_lab.simulator.run_reach import fits_fresh, longest_fitting

UNIT = 16  # the layout unit on the a100-80gb-x8 node (2p)


def test_longest_fitting_is_the_last_multiple_of_the_unit_that_fits(monkeypatch):
    probes = []

    def fits(make, seq_len, batch=1):
        probes.append(seq_len)
        return seq_len <= 1000

    monkeypatch.setattr(run_reach, "fits_fresh", fits)
    assert longest_fitting(None, UNIT, start=96) == 992  # 62 x 16 fits, 63 x 16 = 1008 does not
    assert longest_fitting(None, UNIT) == 992
    assert all(p % UNIT == 0 for p in probes)
    assert longest_fitting(None, 2000) == 0  # not even one unit


def test_table5_fine_lengths_reach_past_the_sampled_gap(tmp_path, capsys, monkeypatch):
    """A sample of four sequences stops far short; the fine grid finds the planner's own limit, which fits in a
    fresh process while one unit more does not, and the sampled columns stay what they were. Asked again (here
    as a table), the finished searches are reused as the runs are; forced, they run again."""
    argv = ["experiment", "table5", "--out", str(tmp_path), "--size", "4", "--format", "json"]
    assert main(argv) == 0
    plain = {r["variant"]: r for r in json.loads(capsys.readouterr().out)["table5"]}
    assert all("max_len_fine_grid" not in r for r in plain.values())
    assert main(argv + ["--fine-lengths"]) == 0
    fine = {r["variant"]: r for r in json.loads(capsys.readouterr().out)["table5"]}
    assert [(r["max_len"], r["time_s"]) for r in fine.values()] == [(r["max_len"], r["time_s"])
                                                                   for r in plain.values()]
    full, no_metp = fine["full"]["max_len_fine_grid"], fine["without metp"]["max_len_fine_grid"]
    assert full > fine["full"]["max_len"] and full % UNIT == 0
    assert no_metp < full  # METP is the lightest layout: without it the planner stops earlier
    setup = Setup(size=4)
    make = partial(planner_of, setup, "gpt", PAPER_POLICY)
    assert fits_fresh(make, full) and not fits_fresh(make, full + UNIT)
    make = partial(planner_of, setup, "gpt", PAPER_POLICY, exclude=("metp",))
    assert fits_fresh(make, no_metp) and not fits_fresh(make, no_metp + UNIT)
    searches = []
    monkeypatch.setattr(ablation_experiment, "longest_fitting", lambda *a, **k: searches.append(a) or full + UNIT)
    assert main(argv[:-2] + ["--fine-lengths"]) == 0 and searches == []
    table = capsys.readouterr().out
    assert "max len, fine grid" in table and str(full) in table and str(no_metp) in table
    forced = ablation_experiment._fine_grid(setup, tmp_path, "table5", "full", {}, fine["full"]["max_len"], True)
    assert len(searches) == 1 and forced == full + UNIT  # --force: searched again (the stand-in answers)


def test_table5_paper_lengths_trains_the_papers_lengths_where_they_fit(tmp_path, capsys):
    """With the paper's lengths added the full system reaches the paper's 329,728 and the run without METP
    the paper's 112,128 (its limit, 117,936, lies below the next length tried); the sample's table stays."""
    argv = ["experiment", "table5", "--out", str(tmp_path), "--size", "4", "--format", "json"]
    assert main(argv) == 0
    plain = {r["variant"]: r for r in json.loads(capsys.readouterr().out)["table5"]}
    assert main(argv + ["--paper-lengths"]) == 0
    added = {r["variant"]: r for r in json.loads(capsys.readouterr().out)["table5"]}
    assert plain["full"]["max_len"] < 112_128 and plain["full"]["lengths"] == "sample"
    assert (added["full"]["max_len"], added["without metp"]["max_len"]) == (329_728, 112_128)
    assert added["full"]["lengths"] == "sample + paper's Table 5 lengths"
    assert added["full"]["time_s"] > plain["full"]["time_s"]
    on_disk = pd.read_csv(tmp_path / "table5.csv").set_index("variant")
    assert on_disk.loc["full", "max_len"] == plain["full"]["max_len"]  # the sample's table is not overwritten
    assert pd.read_csv(tmp_path / "table5_paper_lengths.csv").set_index("variant").loc["full", "max_len"] == 329_728
    assert len(list((tmp_path / "runs" / "table5-paper-lengths").glob("*.csv"))) == 8
