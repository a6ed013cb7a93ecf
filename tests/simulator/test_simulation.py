import functools
import json

import numpy as np
import pandas as pd
import pytest

from paradyse_lab.cli import main
from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.core.layer_graph import LayerGraph
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.costmodel import AnalyticCostModel
from paradyse_lab.errors import UserInputError
from paradyse_lab.simulator import shared
from paradyse_lab.simulator.engine import Charger, simulate
from paradyse_lab.simulator.experiments import Setup, run_one
from paradyse_lab.simulator.planner import build_planner
from paradyse_lab.simulator.run_metrics import summarize
from paradyse_lab.workload.lengths import Workload

SETUP = Setup(size=120)
_STORE = shared.new_store()
"""The cost models and problems `shared_run`'s runs share, as an experiment's runs do (`shared.sharing`: that
sharing changes no run's rows is checked by `test_runs_sharing_cost_models_and_problems_are_the_runs_alone`)."""


@functools.cache
def _rows(setup: Setup, model: str, dataset: str, policy: str, smoothing: bool) -> pd.DataFrame:
    with shared.sharing(_STORE):
        return run_one(setup, model, dataset, policy, smoothing=smoothing)


def shared_run(setup: Setup, model: str, dataset: str, policy: str, smoothing: bool = True) -> pd.DataFrame:
    """`run_one`'s rows, simulated once per arguments in this module for the tests that compare runs, their cost
    models and problems shared (`_STORE`; a copy: the one determinism test calls `run_one` itself, twice)."""
    return _rows(setup, model, dataset, policy, smoothing).copy()


def test_cumulative_time_is_monotone_and_sums_charged_time():
    rows = shared_run(SETUP, "gpt", "grch38", "dynamic:heuristic")
    cum = rows["cumulative_time_s"].to_numpy()
    assert np.all(np.diff(cum) >= 0)
    assert cum[-1] == pytest.approx(rows["charged_time_s"].sum())


def test_static_run_stops_at_its_first_oom():
    rows = shared_run(SETUP, "gpt", "grch38", "static:megatron_ts")
    assert rows["oom"].iloc[-1] and not rows["oom"].iloc[:-1].any()
    assert rows["peak_bytes"].iloc[-1] > rows["budget_bytes"].iloc[-1]
    assert rows["charged_time_s"].iloc[-1] == 0
    assert len(rows) < SETUP.size  # the longer sequences were never reached


def test_restart_pays_the_restart_cost_and_continues_lighter():
    static = shared_run(SETUP, "gpt", "grch38", "static:megatron_ts")
    rows = shared_run(SETUP, "gpt", "grch38", "restart:megatron_ts")
    assert rows["restarted"].sum() >= 1 and len(rows) > len(static)
    first = rows.index[rows["restarted"]][0]
    assert "metp" in rows["plan"].iloc[first] or "ulysses_z" in rows["plan"].iloc[first]
    before = rows["cumulative_time_s"].iloc[first - 1]
    assert rows["cumulative_time_s"].iloc[first] == pytest.approx(before + 31.0 + rows["charged_time_s"].iloc[first])


@pytest.mark.parametrize("model, dataset", [("gpt", "grch38"), ("llama", "github_code"), ("bert", "grch38")])
def test_dynamic_dp_is_never_slower_than_the_heuristic(model, dataset):
    dp = shared_run(SETUP, model, dataset, "dynamic:dp", smoothing=False)
    heur = shared_run(SETUP, model, dataset, "dynamic:heuristic", smoothing=False)
    n = min(len(dp), len(heur))
    assert len(dp) >= len(heur)
    assert np.all(dp["charged_time_s"].iloc[:n].to_numpy() <= heur["charged_time_s"].iloc[:n].to_numpy() + 1e-12)
    assert dp["seq_len"][~dp["oom"]].max() >= heur["seq_len"][~heur["oom"]].max()


def test_dynamic_trains_longer_than_every_static_baseline_but_metp_and_faster_than_metp():
    dyn = summarize(shared_run(SETUP, "gpt", "grch38", "dynamic:dp"), "gpt", "grch38", "dp")
    for name in ("megatron_ts", "megatron_cz", "ulysses_z"):
        static = summarize(shared_run(SETUP, "gpt", "grch38", f"static:{name}"), "gpt", "grch38", name)
        assert dyn.max_seq_len_trained > static.max_seq_len_trained
    metp = summarize(shared_run(SETUP, "gpt", "grch38", "static:metp"), "", "", "")
    assert dyn.max_seq_len_trained == metp.max_seq_len_trained and dyn.total_time_s < metp.total_time_s


def test_smoothing_reduces_switches():
    for model in ("bert", "gpt"):
        on = shared_run(SETUP, model, "github_code", "dynamic:dp")
        off = shared_run(SETUP, model, "github_code", "dynamic:dp", smoothing=False)
        assert on["switched"].sum() <= off["switched"].sum()
        assert on["kept_previous"].sum() > 0 or model == "gpt"
    on = shared_run(SETUP, "bert", "github_code", "dynamic:dp")
    off = shared_run(SETUP, "bert", "github_code", "dynamic:dp", smoothing=False)
    assert on["switched"].sum() < off["switched"].sum()
    # Smoothing only keeps a plan within 5% of the best.
    assert on["charged_time_s"].sum() <= 1.05 * off["charged_time_s"].sum()


def test_cache_reuses_plans_for_repeated_lengths():
    model = get_model("gpt")
    cluster = get_cluster("a100-80gb-x8")
    planner = build_planner("dynamic:dp", model, cluster)
    rows = simulate(Workload("w", (4096, 4096, 8192, 4096)), planner.policy, planner.charger())
    assert rows["cached"].tolist() == [False, True, False, True]
    assert rows["solve_ms"].iloc[1] == 0


def test_lengths_are_padded_to_the_layout_unit():
    model = get_model("gpt")
    cluster = get_cluster("a100-80gb-x8")
    planner = build_planner("static:megatron_cz", model, cluster)
    rows = simulate(Workload("w", (1000, 4097)), planner.policy, planner.charger())
    assert rows["padded_len"].tolist() == [1008, 4112]


def test_one_rank_runs_lengths_unpadded_like_the_runtime():
    """At p = 1 the layout unit is 1 (paradyse_lab.core.strategies.layout_unit, the runtime's): no padding, and a
    causal ring strategy runs an odd length."""
    model, cluster = get_model("gpt2-tiny"), get_cluster("a100-80gb-x8")
    planner = build_planner("static:megatron_cz", model, cluster, p=1)
    rows = simulate(Workload("w", (1001, 4097)), planner.policy, planner.charger())
    assert rows["padded_len"].tolist() == [1001, 4097]
    assert not rows["oom"].any()


def test_results_are_deterministic_for_a_seed():
    a = run_one(SETUP, "llama", "github_code", "dynamic:heuristic").drop(columns="solve_ms")
    b = run_one(SETUP, "llama", "github_code", "dynamic:heuristic").drop(columns="solve_ms")
    pd.testing.assert_frame_equal(a, b)


def test_bad_policies():
    for spec, match in [("static:zero", r"valid: .*megatron_cz, megatron_cz\+recompute, megatron_ts"),
                        ("greedy", r"valid: static:NAME\[\+recompute\]"),
                        ("dynamic:magic", "unknown solver")]:
        with pytest.raises(UserInputError, match=match):
            run_one(SETUP, "gpt", "grch38", spec)
    with pytest.raises(UserInputError, match="excluded strategy"):
        run_one(SETUP, "gpt", "grch38", "dynamic:dp", exclude=("nope",))


def test_a_runs_csv_is_its_rows_less_the_timings_and_the_timings_file_the_rest(tmp_path):
    """`write_with_timings` (every experiment's run files): the rows less the measured columns, written as pandas
    writes them, and the step beside the measured columns in timings/; read back joined, the rows again."""
    from paradyse_lab.results.timings import read_with_timings, timings_path, write_with_timings
    from paradyse_lab.simulator.experiments import TIMING_COLUMNS

    rows = shared_run(SETUP, "gpt", "grch38", "dynamic:heuristic")
    path = tmp_path / "run.csv"
    assert write_with_timings(rows, path, TIMING_COLUMNS, ("step",)) == [path, timings_path(path)]
    assert path.read_text() == rows.drop(columns=list(TIMING_COLUMNS)).to_csv(index=False)
    assert timings_path(path).read_text() == rows[["step", *TIMING_COLUMNS]].to_csv(index=False)
    pd.testing.assert_frame_equal(read_with_timings(path)[list(rows.columns)], rows, check_dtype=False)


def test_simulate_command_json(capsys, tmp_path):
    out = tmp_path / "rows.csv"
    code = main(["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "dynamic:heuristic",
                 "--size", "60", "--format", "json", "--out", str(out)])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert set(data) == {"model", "dataset", "policy", "steps", "total_time_s", "max_seq_len_trained",
                         "oom_at_seq_len", "switches", "planning_overhead_frac", "tokens_trained"}
    assert isinstance(data["steps"], int) and 0 <= data["planning_overhead_frac"] < 1
    rows = pd.read_csv(out)
    assert len(rows) >= data["steps"] and data["tokens_trained"] == rows[~rows["oom"]]["seq_len"].sum()


def test_simulate_command_bad_input(capsys, tmp_path):
    bad = tmp_path / "l.txt"
    bad.write_text("100\n-1\n")
    for argv, match in [
        (["--dataset", f"file:{bad}", "--policy", "static:metp"], "line 2: length must be a positive integer"),
        (["--dataset", "grch38", "--policy", "static:metp", "--size", "0"], "--size must be a positive integer"),
        (["--dataset", "grch38", "--policy", "static:metp", "--exclude", "metp"], "dynamic:SOLVER policies only"),
    ]:
        assert main(["simulate", "--model", "gpt", *argv]) == 2
        err = capsys.readouterr().err
        assert match in err and err.count("\n") == 1


def test_experiments_write_csvs_and_skip_finished_runs(tmp_path, capsys):
    argv = ["experiment", "table5", "--out", str(tmp_path), "--size", "4", "--format", "json"]
    assert main(argv) == 0
    table = json.loads(capsys.readouterr().out)["table5"]
    assert [r["variant"] for r in table][-1] == "without random forest" and table[-1]["status"] == "ok"
    runs = sorted((tmp_path / "runs" / "table5").glob("*.csv"))
    assert len(runs) == 8 and (tmp_path / "table5.csv").exists()
    stamp = {p: p.stat().st_mtime_ns for p in runs}
    assert main(argv) == 0
    assert {p: p.stat().st_mtime_ns for p in runs} == stamp  # reused, not rerun
    assert main(argv + ["--force"]) == 0
    assert any(p.stat().st_mtime_ns != stamp[p] for p in runs)
    capsys.readouterr()
    assert main(["experiment", "fig2", "--out", str(tmp_path), "--size", "3", "--no-exact",
                 "--paper-policies-only"]) == 0
    out = capsys.readouterr().out
    assert "89.29%" in out and "181.22%" in out
    assert len(list((tmp_path / "runs" / "fig2").glob("*.csv"))) == 30
    assert not (tmp_path / "fig2_beyond.csv").exists()


def test_switch_memory_leaves_static_runs_unchanged():
    plain = shared_run(SETUP, "llama", "grch38", "static:metp")
    switching = shared_run(Setup(size=120, switch_memory=True), "llama", "grch38", "static:metp")
    pd.testing.assert_frame_equal(plain.drop(columns="solve_ms"), switching.drop(columns="solve_ms"))


def test_switch_memory_charges_the_reservations_of_every_strategy_used_so_far():
    model = get_model("gpt")
    graph, cm = LayerGraph(model), AnalyticCostModel(model, get_cluster("a100-80gb-x8"))
    plain, charger = Charger(graph, cm, 10**12), Charger(graph, cm, 10**12, switch_memory=True)
    p = charger.problem(8192, 1)
    ts, me = p.option_index("megatron_ts"), p.option_index("metp")
    mixed = ["megatron_ts"] * 4 + ["metp"] * 4
    base = p.fixed_bytes + int(p.kept_bytes[np.arange(8), [ts] * 4 + [me] * 4].sum())
    t_ts, t_me = int(p.transient_bytes[:, ts].max()), int(p.transient_bytes[:, me].max())
    assert plain.charge(mixed, 8192, 1)[1] == base + max(t_ts, t_me)
    assert charger.charge(mixed, 8192, 1)[1] == base + t_ts + t_me  # both strategies' buffers reserved
    assert charger.charge(mixed, 8192, 1)[0] == plain.charge(mixed, 8192, 1)[0]  # time is unchanged
    charger.commit(mixed, 8192, 1)
    assert charger.reserved == {"megatron_ts": t_ts, "metp": t_me}
    only_metp = ["metp"] * 8
    q = charger.problem(4096, 1)
    kept = q.fixed_bytes + int(q.kept_bytes[:, q.option_index("metp")].sum())
    # a later plan of one strategy still pays the other's reservation, kept at its largest size
    assert charger.charge(only_metp, 4096, 1)[1] == kept + t_ts + max(t_me, int(q.transient_bytes[:, me].max()))


def test_switch_memory_can_end_a_dynamic_run_before_the_lightest_static_one():
    setup = Setup(size=120, switch_memory=True)
    heuristic = summarize(shared_run(setup, "gpt", "grch38", "dynamic:heuristic"), "gpt", "grch38", "h")
    metp = summarize(shared_run(setup, "gpt", "grch38", "static:metp"), "gpt", "grch38", "m")
    plain = summarize(shared_run(SETUP, "gpt", "grch38", "dynamic:heuristic"), "gpt", "grch38", "h")
    assert plain.max_seq_len_trained == metp.max_seq_len_trained
    assert heuristic.oom_at_seq_len is not None and heuristic.max_seq_len_trained < metp.max_seq_len_trained


def test_paper_truth_setup_plans_and_charges_with_the_measured_times():
    rows = run_one(Setup(size=40, truth="paper"), "bert", "github_code", "dynamic:heuristic")
    from paradyse_lab.costmodel.paper import PaperCostModel
    from paradyse_lab.simulator.engine import Charger as C

    cm = PaperCostModel(get_model("bert"), get_cluster("a100-80gb-x8"))
    charger = C(LayerGraph(get_model("bert")), cm, 10**12)
    for r in rows.head(5).itertuples():
        assert r.charged_time_s == pytest.approx(charger.charge(r.plan.split(), r.padded_len, 1)[0])
        assert r.predicted_time_s == pytest.approx(r.charged_time_s)  # planned with the same truth


@pytest.mark.parametrize("spec, flags, expected", [
    ("dynamic:dp", {}, ("dynamic:dp", False, "block", "dynamic:dp")),
    ("dynamic:dp+recompute+sublayer", {}, ("dynamic:dp", True, "sublayer", "dynamic:dp+recompute+sublayer")),
    ("dynamic:heuristic+sublayer", {"recompute": True}, ("dynamic:heuristic", True, "sublayer",
                                                          "dynamic:heuristic+recompute+sublayer")),
    ("dynamic:dp", {"granularity": "sublayer"}, ("dynamic:dp", False, "sublayer", "dynamic:dp+sublayer")),
    ("static:metp+recompute", {}, ("static:metp+recompute", True, "block", "static:metp+recompute")),
    ("static:metp", {"recompute": True}, ("static:metp+recompute", True, "block", "static:metp+recompute")),
])
def test_policy_spec_reads_suffixes_and_flags(spec, flags, expected):
    from paradyse_lab.simulator.policy_spec import PolicySpec

    p = PolicySpec.parse(spec, **flags)
    assert (p.base, p.recompute, p.granularity, p.name) == expected


@pytest.mark.parametrize("spec", ["dynamic:dp+fast", "dynamic:+recompute", "restart:metp+recompute",
                                  "static:metp+sublayer"])
def test_bad_policy_suffixes_are_user_errors(spec):
    with pytest.raises(UserInputError, match="unknown"):
        run_one(Setup(size=3), "gpt", "grch38", spec)


def test_recompute_and_sublayer_keep_cache_and_smoothing_working():
    model = get_model("gpt")
    cluster = get_cluster("a100-80gb-x8")
    planner = build_planner("dynamic:dp+recompute+sublayer", model, cluster, budget_bytes=cluster.memory_bytes - 2**30)
    policy, charger = planner.policy, planner.charger()
    assert (planner.graph.granularity, charger.options) == ("sublayer", Charger(planner.graph, planner.cost_model, 0,
                                                                               recompute=True).options)
    lengths = (266240, 266240, 267264, 268288, 266240)  # 260K: where the plans need recomputation somewhere
    rows = simulate(Workload("w", lengths), policy, charger)
    assert rows["cached"].tolist() == [False, True, False, False, True]
    assert all(len(plan.split()) == 2 * model.layers for plan in rows["plan"])
    assert rows["plan"].str.contains(r"\+recompute").any()  # at 260K the plan needs recomputation somewhere
    assert rows["kept_previous"].iloc[2:4].any()  # nearby lengths: smoothing keeps the previous plan
    assert rows["policy"].iloc[0] == "dynamic:dp+recompute+sublayer"


def test_switching_between_recompute_and_not_is_charged_as_the_cost_model_says():
    model = get_model("gpt")
    cluster = get_cluster("a100-80gb-x8")
    cm, graph = AnalyticCostModel(model, cluster), LayerGraph(model, "sublayer")
    charger = Charger(graph, cm, cluster.memory_bytes, recompute=True)
    plan = ["metp", "metp+recompute"] * model.layers  # attention kept, MLP recomputed, in every layer
    time_s, peak = charger.charge(plan, 65536, 1)
    from paradyse_lab.core.strategies import StrategyOption

    att, mlp = cm.sublayer("attention", StrategyOption("metp"), 65536), cm.sublayer("mlp", StrategyOption(
        "metp", True), 65536)
    assert time_s == pytest.approx(model.layers * (att.time_s + mlp.time_s))  # no switch cost: one layout
    states = model.layers * (att.model_state_bytes + mlp.model_state_bytes)
    assert peak == states + model.layers * (att.kept_bytes + mlp.kept_bytes) + max(att.transient_bytes,
                                                                                  mlp.transient_bytes)


def test_dp_with_recompute_trains_grch38_gpt_to_the_end_where_the_paper_policies_stop():
    setup = Setup(size=60)
    heur = summarize(shared_run(setup, "gpt", "grch38", "dynamic:heuristic"), "gpt", "grch38", "h")
    rc = summarize(shared_run(setup, "gpt", "grch38", "dynamic:dp+recompute"), "gpt", "grch38", "rc")
    metp = summarize(shared_run(setup, "gpt", "grch38", "static:metp+recompute"), "gpt", "grch38", "m")
    assert heur.oom_at_seq_len is not None and rc.oom_at_seq_len is None
    assert rc.max_seq_len_trained == metp.max_seq_len_trained > heur.max_seq_len_trained
    assert rc.total_time_s < metp.total_time_s  # recomputing only where needed beats recomputing everywhere


def test_experiment_runs_made_under_another_truth_are_rerun_not_reused(tmp_path, capsys):
    """BERT's panels made under the analytic truth, then `experiment fig2 --truth-cost-model paper` into the same
    folder: its BERT headlines are the paper truth's (its runs made again, not the analytic ones reused), the ones
    a fresh folder gets. The two runs beside the command's are BERT's alone (the Python call of the experiment):
    the command's BERT runs are the ones the claim reads."""
    from paradyse_lab.simulator.experiments import fig2

    def bert_savings(root, truth):
        _, heads = fig2(Setup(size=3, truth=truth), root, exact=False, models=("bert",), progress=False)
        return list(heads["max_time_reduction"])

    analytic = bert_savings(tmp_path, "analytic")
    argv = ["experiment", "fig2", "--out", str(tmp_path), "--size", "3", "--no-exact", "--paper-policies-only",
            "--format", "json", "--truth-cost-model", "paper"]
    assert main(argv) == 0
    paper = [h["max_time_reduction"] for h in json.loads(capsys.readouterr().out)["headlines"] if h["model"] == "bert"]
    assert paper != analytic
    assert paper == bert_savings(tmp_path / "fresh", "paper")


def test_a_calibrated_cluster_file_finds_its_base_devices_profiles():
    setup = Setup(cluster="a100-80gb-x8-paper", size=10)
    assert setup.profile_path().endswith("analytic_a100-80gb-x8.csv")
    rows = run_one(setup, "gpt", "grch38", "dynamic:dp", plan_cost_model="hybrid")
    assert len(rows) == 10
    calibrated = run_one(Setup(cluster="a100-80gb-x8-paper", size=10, profiles="/nonexistent.csv"), "gpt",
                         "grch38", "dynamic:dp", truth_cost_model="calibrated")  # no profile needed: no fit
    assert len(calibrated) == 10


def test_restart_policies_refuse_recompute_and_sublayer():
    for setup in (Setup(size=3, recompute=True), Setup(size=3, granularity="sublayer")):
        with pytest.raises(UserInputError, match="a restart policy runs one plain strategy"):
            run_one(setup, "gpt", "grch38", "restart:metp")


def test_fig2_names_its_series_as_they_run_under_recompute_and_sublayer_flags(tmp_path):
    from paradyse_lab.simulator.experiments import fig2

    setup = Setup(size=8, recompute=True, granularity="sublayer")
    summaries, headlines = fig2(setup, tmp_path, exact=False, models=("bert",), datasets=("github_code",),
                                progress=False, beyond=True)
    assert list(summaries.policy) == ["static:megatron_ts+recompute", "static:megatron_cz+recompute",
                                      "static:ulysses_z+recompute", "static:metp+recompute",
                                      "dynamic:heuristic+recompute+sublayer", "dynamic:dp+recompute+sublayer",
                                      "dynamic:dp+recompute+tiled+offload+sublayer"]
    assert set(headlines.policy) == {"dynamic:heuristic+recompute+sublayer"}
    for p in summaries.policy:
        run = pd.read_csv(tmp_path / "runs" / "fig2" / f"github_code__bert__{p.replace(':', '-')}.csv")
        assert set(run.policy) == {p}


def test_replay_of_an_executed_run_honours_the_policy_suffixes():
    from paradyse_lab.simulator.replay import replay

    spec = get_model("gpt2-tiny")
    cm = AnalyticCostModel(spec, get_cluster("a100-80gb-x8"), 2)
    sub = replay("dynamic:dp+sublayer", [256, 512], spec, cm, 10**10)
    assert all(len(plan.split()) == 2 * spec.layers for plan in sub["plan"])  # one name per sub-layer, as executed
    rc = replay("static:megatron_ts+recompute", [256, 512], spec, cm, 10**10)
    assert set(rc["plan"].iloc[0].split()) == {"megatron_ts+recompute"}


def test_runs_sharing_cost_models_and_problems_are_the_runs_alone():
    """simulator/shared.py: inside `sharing()` (every experiment's runs) a run's rows are those it has alone,
    and the runs reuse one cost model and one problem per length."""
    setup = Setup(size=12, seed=3)
    policies = ("static:metp", "dynamic:heuristic", "dynamic:dp+recompute")
    alone = [run_one(setup, "gpt", "grch38", p).drop(columns="solve_ms") for p in policies]
    with shared.sharing():
        together = [run_one(setup, "gpt", "grch38", p).drop(columns="solve_ms") for p in policies]
        store = shared._stores[-1]
        assert len(store["models"]) == 1 and store["problems"]
        built = len(store["problems"])
        run_one(setup, "gpt", "grch38", "dynamic:heuristic")
        assert len(store["problems"]) == built  # the second run built nothing
    assert not shared._stores
    for a, b in zip(alone, together):
        pd.testing.assert_frame_equal(a, b)
    kept = shared.new_store()
    with shared.sharing(kept):
        run_one(setup, "gpt", "grch38", "dynamic:heuristic")
    built = len(kept["problems"])
    with shared.sharing(kept):  # a later block given the kept store: its run builds nothing
        again = run_one(setup, "gpt", "grch38", "dynamic:heuristic").drop(columns="solve_ms")
    assert len(kept["problems"]) == built and len(kept["models"]) == 1 and not shared._stores
    pd.testing.assert_frame_equal(again, alone[1])


def test_fig2_two_d_adds_the_two_dimensional_series_beyond_the_paper(tmp_path, capsys):
    from paradyse_lab.simulator.experiments import TWO_D_POLICY, fig2

    summaries, _ = fig2(Setup(size=4), tmp_path, exact=False, models=("gpt",), datasets=("grch38",),
                        progress=False, beyond=True, two_d=True)
    assert TWO_D_POLICY in set(summaries.policy)
    beyond = pd.read_csv(tmp_path / "fig2_beyond.csv")
    two_d, techniques = (beyond[beyond.series == s].iloc[0] for s in ("+ 2-D strategies", "+ tiled MLP + offload"))
    assert two_d.policy == TWO_D_POLICY
    assert two_d.max_seq_len_trained >= techniques.max_seq_len_trained  # more options: never shorter
    assert main(["experiment", "fig2", "--out", str(tmp_path), "--two-d", "--paper-policies-only"]) == 2
    assert "--two-d" in capsys.readouterr().err
