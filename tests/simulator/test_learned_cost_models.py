"""Planning with one cost model, charged by another: the simulator, the CLI flags and Table 5's row."""

import json

import pytest

from paradyse_lab.cli import main
from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.core.layer_graph import LayerGraph
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import USABLE
from paradyse_lab.core.strategies import options as make_options
from paradyse_lab.costmodel import AnalyticCostModel
from paradyse_lab.costmodel.lowering import problem_from_cost_model
from paradyse_lab.errors import UserInputError
from paradyse_lab.simulator.experiments import Setup, run_one

SETUP = Setup(size=30)


def test_a_learned_plan_is_charged_by_the_truth():
    rows = run_one(SETUP, "gpt", "grch38", "dynamic:dp", smoothing=False, plan_cost_model="hybrid")
    model, cluster = get_model("gpt"), get_cluster(SETUP.cluster)
    truth, graph = AnalyticCostModel(model, cluster), LayerGraph(model)
    budget = cluster.memory_bytes - SETUP.reserve_bytes
    trained = rows[~rows["oom"]]
    assert len(trained) > 10
    for r in trained.iloc[::3].itertuples():  # about ten of the ~29 trained steps
        p = problem_from_cost_model(graph, truth, r.padded_len, 1, budget, make_options(USABLE))
        assert r.charged_time_s == pytest.approx(p.time_of(r.plan.split()))
        assert r.peak_bytes == p.peak_bytes(r.plan.split())
    # Predictions come from the learned model, so they differ from what the truth charges.
    assert (trained["predicted_time_s"] != trained["charged_time_s"]).any()


def test_truth_planning_matches_the_default_run():
    a = run_one(SETUP, "bert", "github_code", "dynamic:heuristic").drop(columns="solve_ms")
    b = run_one(SETUP, "bert", "github_code", "dynamic:heuristic", plan_cost_model="analytic",
                truth_cost_model="analytic").drop(columns="solve_ms")
    assert a.equals(b)


def test_residual_truth_and_bad_names():
    rows = run_one(SETUP, "llama", "github_code", "static:metp", truth_cost_model="residual")
    assert not rows["oom"].any() and rows["charged_time_s"].gt(0).all()
    with pytest.raises(UserInputError, match="unknown cost model 'oracle'"):
        run_one(SETUP, "gpt", "grch38", "dynamic:dp", plan_cost_model="oracle")
    with pytest.raises(UserInputError, match="no rows for model gpt2-medium: .* are of bert, a different architecture"):
        run_one(SETUP, "gpt2-medium", "grch38", "dynamic:dp", plan_cost_model="hybrid")  # bert's shapes
    with pytest.raises(UserInputError, match="no rows for model gpt2 "):
        run_one(SETUP, "gpt2", "grch38", "dynamic:dp", plan_cost_model="hybrid")


def test_simulate_command_flags(capsys, tmp_path):
    code = main(["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "dynamic:heuristic", "--size", "40",
                 "--plan-cost-model", "polynomial"])
    out = capsys.readouterr().out
    lines = {line.split()[0] + " " + line.split()[1]: line.split()[-1] for line in out.splitlines()[2:]
             if len(line.split()) >= 3}
    assert code == 0 and lines["profile source"] == "analytic" and lines["plan cost"] == "polynomial"
    assert main(["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "static:metp",
                 "--truth-cost-model", "magic"]) == 2
    err = capsys.readouterr().err
    assert "unknown cost model 'magic'" in err and err.count("\n") == 1
    missing = tmp_path / "none.csv"
    assert main(["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "dynamic:dp",
                 "--plan-cost-model", "hybrid", "--profiles", str(missing)]) == 2
    assert "not found" in capsys.readouterr().err


def test_table5_without_random_forest_row(tmp_path, capsys):
    # a sample on which the polynomial-planned run stops no later than the hybrid-planned one, so its saving is
    # defined (on the stratified 60-sequence sample the polynomial goes further; these 20 sequences: both stop
    # at 347,136 tokens)
    args = ["experiment", "table5", "--out", str(tmp_path), "--size", "20", "--sampling", "multinomial"]
    assert main(args + ["--format", "json"]) == 0
    table = {r["variant"]: r for r in json.loads(capsys.readouterr().out)["table5"]}
    row, full = table["without random forest"], table["full (hybrid cost model)"]
    assert row["status"] == "ok" and row["plan_cost_model"] == "polynomial" and row["profile_source"] == "analytic"
    assert full["plan_cost_model"] == "hybrid" and row["max_len"] > 0 and row["saving"] is not None
    assert row["time_full_s"] == pytest.approx(_time_at(tmp_path, "full-(hybrid-cost-model)", row))
    assert table["full"]["plan_cost_model"] == "analytic" and table["full"]["profile_source"] == ""
    assert main(args) == 0
    assert "[plan: polynomial, profile source=analytic]" in capsys.readouterr().out


def _time_at(root, variant, row):
    import pandas as pd

    runs = pd.read_csv(root / "runs" / "table5" / f"grch38__gpt__{variant}.csv")
    trained = runs[~runs["oom"]]
    wf = pd.read_csv(root / "runs" / "table5" / "grch38__gpt__without-random-forest.csv")
    steps = int((~wf["oom"]).sum())
    return float(trained["cumulative_time_s"].iloc[steps - 1])
