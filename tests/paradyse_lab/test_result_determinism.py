"""Result CSVs are a function of their settings: two runs write them byte for byte the same, and the measured
wall times (solve and planning times) go to `timings/` files beside them (paradyse_lab/results/timings.py)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest

from paradyse_lab.app.reproduce_planner_steps import step_solvers
from paradyse_lab.app.reproduce_settings import Settings
from paradyse_lab.results.timings import TIMINGS_DIR, read_with_timings, timings_path, write_with_timings
from paradyse_lab.simulator import engine, experiments, grouped_runs, groups_experiment
from paradyse_lab.simulator.experiments import Setup
from paradyse_lab.simulator.groups_experiment import GroupsSetup
from paradyse_lab.solvers import bench

TIMING_COLUMNS = set(engine.TIMING_COLUMNS + experiments.SUMMARY_TIMING_COLUMNS + grouped_runs.TIMING_COLUMNS
                     + grouped_runs.SUMMARY_TIMING_COLUMNS + bench.TIMING_COLUMNS + ("solve_ms_mean",))
TINY = Settings(quick=True, size=6, bench_sizes=(8,), bench_options=(4,), bench_kinds=("random",),
                bench_instances=1, costmodels=("analytic",), map_lengths=4, packing_panels=())


def _run_everything_that_times(root: Path, monkeypatch) -> None:
    """A small Figure 2 panel (the statics and the heuristic), one groups panel and the solver benchmark:
    every writer of a measured column."""
    experiments.fig2(Setup(size=6), root, models=("gpt",), datasets=("grch38",), exact=False, progress=False)
    monkeypatch.setattr(groups_experiment, "PANELS", (("a100-80gb", ("bert",)),))
    monkeypatch.setattr(groups_experiment, "DATASETS", ("github_code",))
    groups_experiment.groups(GroupsSetup(size=6, global_batch=3, node_counts=(1,)), root, progress=False)
    step_solvers(root, TINY, force=False)  # its ILP rows too: CP-SAT stops at a deterministic limit


def _csvs(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.csv")) if ".stamps" not in p.parts}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Path, Path]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        roots = tmp_path_factory.mktemp("first"), tmp_path_factory.mktemp("second")
        for root in roots:
            _run_everything_that_times(root, monkeypatch)
    return roots


def test_two_runs_write_byte_identical_result_csvs(two_runs):
    first, second = map(_csvs, two_runs)
    assert first.keys() == second.keys()
    results = [name for name in first if TIMINGS_DIR not in Path(name).parts]
    assert {"fig2_summary.csv", "groups.csv", "solver_bench.csv"} <= set(results)
    assert any(name.startswith("runs/fig2/") for name in results)
    assert any(name.startswith("runs/groups/") for name in results)
    assert [name for name in results if first[name] != second[name]] == []
    assert "ilp" in set(pd.read_csv(two_runs[0] / "solver_bench.csv").solver)


def test_measured_columns_live_only_in_the_timings_files(two_runs):
    root = two_runs[0]
    for path in sorted(root.rglob("*.csv")):
        if ".stamps" in path.parts or TIMINGS_DIR in path.parts:
            continue
        assert not TIMING_COLUMNS & set(pd.read_csv(path, nrows=0).columns), path
    for name in ("fig2_summary.csv", "groups.csv", "solver_bench.csv", "runs/fig2/grch38__gpt__dynamic-heuristic.csv"):
        joined = read_with_timings(root / name)
        assert TIMING_COLUMNS & set(joined.columns), name
        assert len(joined) == len(pd.read_csv(root / name))
    run = read_with_timings(root / "runs/fig2/grch38__gpt__dynamic-heuristic.csv")
    assert (run["solve_ms"] >= 0).all() and (run["solve_ms"] > 0).any()


def test_a_reused_run_reads_its_timings_back(two_runs):
    """A finished run is reused with its own measured times (the rows the engine returned)."""
    from paradyse_lab.simulator.results import load_or_run

    path = two_runs[0] / "runs/fig2/grch38__gpt__dynamic-heuristic.csv"
    before = read_with_timings(path)
    settings = {**asdict(Setup(size=6)), "run": ["grch38", "gpt", "dynamic:heuristic"]}
    rows, ran = load_or_run(path, lambda: pytest.fail("recomputed"), settings=settings,
                            timing_columns=engine.TIMING_COLUMNS)
    assert not ran and sorted(rows.columns) == sorted(engine.ROW_COLUMNS)
    pd.testing.assert_frame_equal(rows, before)


def test_timings_of_other_rows_are_not_joined(tmp_path):
    df = pd.DataFrame({"step": [0, 1], "x": [1.5, 2.5], "solve_ms": [0.1, 0.2]})
    assert write_with_timings(df, tmp_path / "a.csv", ("solve_ms",), ("step",)) == [tmp_path / "a.csv",
                                                                                    timings_path(tmp_path / "a.csv")]
    pd.testing.assert_frame_equal(read_with_timings(tmp_path / "a.csv"), df)
    pd.DataFrame({"step": [0, 2], "solve_ms": [0.1, 0.2]}).to_csv(timings_path(tmp_path / "a.csv"), index=False)
    assert list(read_with_timings(tmp_path / "a.csv").columns) == ["step", "x"]
    assert write_with_timings(df.drop(columns="solve_ms"), tmp_path / "b.csv", ("solve_ms",), ("step",)) == [
        tmp_path / "b.csv"]


def test_a_rewrite_without_timings_drops_the_old_timings_file(tmp_path):
    df = pd.DataFrame({"step": [0, 1], "x": [1.5, 2.5], "solve_ms": [0.1, 0.2]})
    write_with_timings(df, tmp_path / "a.csv", ("solve_ms",), ("step",))
    write_with_timings(df.drop(columns="solve_ms"), tmp_path / "a.csv", ("solve_ms",), ("step",))
    assert not timings_path(tmp_path / "a.csv").exists()
    assert list(read_with_timings(tmp_path / "a.csv").columns) == ["step", "x"]


def test_timings_without_key_columns_are_not_joined_by_position(tmp_path):
    pd.DataFrame({"x": [1.5, 2.5]}).to_csv(tmp_path / "a.csv", index=False)
    timings_path(tmp_path / "a.csv").parent.mkdir()
    pd.DataFrame({"solve_ms": [0.1, 0.2]}).to_csv(timings_path(tmp_path / "a.csv"), index=False)
    assert list(read_with_timings(tmp_path / "a.csv").columns) == ["x"]
