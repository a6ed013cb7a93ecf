"""The measured cluster file: alpha-beta fits, efficiency curves, the TOML round trip, and the CLI's checks.

Run: `python -m pytest -q tests/paradyse_lab/test_measured_cluster.py`. The whole measure -> fit -> train -> compare
loop runs on two gloo ranks in tests/runtime/runtime_cases.py (`calibrate-validate-loop`).
"""

from __future__ import annotations

import numpy as np
import pytest

from paradyse_lab.cli import main
from paradyse_lab.cluster.files import load_cluster_toml
from paradyse_lab.cluster.measured import Measurements, efficiency_points, fit_alpha_beta, measured_cluster_toml
from paradyse_lab.cluster.presets import PRESETS
from paradyse_lab.cluster.spec import COLLECTIVES
from paradyse_lab.costmodel.formulas import collective_time_s
from paradyse_lab.simulator.replay import kendall_tau

SIZES = [4096 * 4**i for i in range(7)]


@pytest.mark.parametrize("op", ["all_gather", "all_reduce", "p2p"])
def test_alpha_beta_fit_recovers_the_line(op):
    ranks, alpha, bw = 2, 150e-6, 1.3e9
    factor = {"all_gather": 0.5, "all_reduce": 1.0, "p2p": 1.0}[op]
    noise = np.random.default_rng(0).lognormal(0, 0.02, len(SIZES))
    fit = fit_alpha_beta(op, ranks, SIZES, [(alpha + factor * s / bw) * n for s, n in zip(SIZES, noise)])
    assert fit.alpha_s == pytest.approx(alpha, rel=0.1) and fit.busbw_bytes_per_s == pytest.approx(bw, rel=0.05)
    assert fit.points == len(SIZES) and fit.mape < 0.05


def test_efficiency_is_the_flop_weighted_rate_over_the_fastest():
    pts = efficiency_points([(64, 2e9, 1.0), (64, 2e9, 3.0), (512, 8e9, 1.0)], peak_flops=8e9)
    assert pts == ((64.0, pytest.approx(0.125)), (512.0, 1.0))


def _measurements(ranks=2) -> Measurements:
    coll = {op: [(s, 100e-6 + s / 2e9) for s in SIZES] for op in COLLECTIVES} if ranks > 1 else {}
    return Measurements(ranks=ranks, gpu_name='cpu "x86"', memory_bytes=8 * 2**30, hbm_bytes_per_s=5e9,
                        gemm=[(64, 1e9, 0.1), (512, 1e9, 0.02)], attention=[(256, True, 1e8, 0.01),
                                                                            (128, False, 1e8, 0.004)],
                        collectives=coll, provenance={"host": "h", "device": "d", "date": "2026-01-01",
                                                      "software": "torch=x", "name": "cluster"})


def test_toml_round_trip_and_measured_alpha_is_charged(tmp_path):
    path = tmp_path / "cluster.toml"
    path.write_text(measured_cluster_toml(_measurements()))
    cl = load_cluster_toml(path)
    assert cl.gpus == 2 and cl.gpu_name == 'cpu "x86"' and cl.memory_bytes == 8 * 2**30
    assert cl.source.startswith("measured") and cl.peak_flops == pytest.approx(5e10)  # the fastest kernel
    assert cl.gemm_eff(512) == pytest.approx(1.0) and cl.gemm_eff(64) == pytest.approx(0.2)
    assert cl.attention_eff(256, True) == pytest.approx(0.2) and cl.attention_eff(128, False) == pytest.approx(0.5)
    for op in COLLECTIVES:
        assert cl.alpha_by_op_s[op] == pytest.approx(100e-6, rel=1e-3)
    # t = alpha + f S / busbw with the fitted per-kind alpha (not alpha_base + steps x alpha_step)
    assert collective_time_s(cl, "all_reduce", 2**20, 2) == pytest.approx(100e-6 + 2**20 / 2e9, rel=1e-3)
    # a preset keeps its base + per-step latency
    a100 = PRESETS["a100-80gb-x8"]
    assert a100.alpha_s("all_reduce", 14) == pytest.approx(6.6e-6 + 14 * 0.6e-6)


def test_one_rank_file_has_no_alphas_and_loads(tmp_path):
    path = tmp_path / "one.toml"
    path.write_text(measured_cluster_toml(_measurements(ranks=1)))
    cl = load_cluster_toml(path)
    assert cl.gpus == 1 and cl.alpha_by_op_s == {}


def test_bad_alpha_table(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('base = "a100-80gb-x8"\n[alpha_us]\nmagic = 3\n')
    from paradyse_lab.errors import UserInputError

    with pytest.raises(UserInputError, match="valid: all_gather"):
        load_cluster_toml(path)


def test_kendall_tau():
    assert kendall_tau(["a", "b", "c"], ["a", "b", "c"]) == 1.0
    assert kendall_tau(["a", "b", "c"], ["c", "b", "a"]) == -1.0


@pytest.mark.parametrize("argv, match", [
    (["calibrate", "--out", "{d}", "--model", "nope"], "unknown model 'nope'"),
    (["calibrate", "--out", "{d}", "--budget-s", "-3"], "--budget-s must be a positive number"),
    (["calibrate", "--out", "{d}", "--model", "bert"], "GPT-2-shaped"),
    (["calibrate", "--out", "{d}", "--model", "gpt2-tiny", "--nproc", "5"], "must be divisible|divisible"),
    (["validate-run", "--out", "{d}", "--cost-model", "nope"], "unknown --cost-model 'nope'; valid: .*analytic"),
    (["validate-run", "--out", "{d}", "--policies", "fast"], "static:NAME or dynamic:SOLVER"),
    (["validate-run", "--out", "{d}", "--repeats", "0"], "--repeats must be a positive"),
    (["train", "--model", "gpt2-tiny", "--dataset", "uniform", "--cost-model", "nope"], "unknown --cost-model"),
    (["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "dynamic:dp", "--cost-model", "x"],
     "unknown cost model 'x'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, match):
    import re

    code = main([a.format(d=tmp_path / "out") for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and re.search(match, err), err
    assert not (tmp_path / "out" / "cluster.toml").exists()


def test_calibrate_refuses_a_folder_of_other_settings(tmp_path, capsys):
    import json

    (tmp_path / "calibrate.json").write_text(json.dumps({"settings": {"model": "other"}, "done": []}))
    code = main(["calibrate", "--out", str(tmp_path), "--model", "gpt2-tiny", "--max-len", "16"])
    assert code == 2 and "other settings" in capsys.readouterr().err


def test_pair_takes_the_median_of_repeats_and_replays_the_same_plans(tmp_path):
    """validate-run's comparison on a hand-written measured log: medians over repeats, spread, skipped
    start-up steps, the replayed plans and their predicted times, the rankings and speed-ups."""
    import json

    import pandas as pd

    from paradyse_lab.app.validate_run import MEASURED_FILE, META_FILE, pair, run_totals
    from paradyse_lab.simulator.replay import compare

    meta = {"p": 2, "dtype": "fp32", "model": "gpt2-tiny", "cluster": "", "cost_model": "analytic", "profiles": ""}
    (tmp_path / META_FILE).write_text(json.dumps(meta))
    rows = []
    for policy, plan, base in (("static:megatron_ts", "TS,TS,TS,TS", 1.0), ("static:metp", "ME,ME,ME,ME", 2.0),
                               ("dynamic:dp", "", 1.5)):
        for repeat, scale in ((0, 1.0), (1, 1.2), (2, 0.9)):
            for step, s in ((1, 16), (2, 32), (3, 64)):
                rows.append({"policy": policy, "repeat": repeat, "step": step, "seq_len": s,
                             "step_s": base * scale * step, "plan": plan, "loss": 1.0})
    pd.DataFrame(rows).to_csv(tmp_path / MEASURED_FILE, index=False)
    steps = pair(tmp_path, skip=1)
    ts = steps[steps["policy"] == "static:megatron_ts"]
    assert ts["measured_s"].tolist() == pytest.approx([1.0, 2.0, 3.0])  # the median of 0.9x, 1x, 1.2x
    assert ts["measured_max_s"].tolist() == pytest.approx([1.2, 2.4, 3.6]) and (ts["repeats"] == 3).all()
    assert ts["counted"].tolist() == [False, True, True] and ts["plan_match"].all()
    assert (steps["predicted_s"] > 0).all()
    dp = steps[steps["policy"] == "dynamic:dp"]
    assert not dp["plan_match"].any() and (dp["simulated_plan"].str.count(",") == 3).all()
    result = compare(steps, ["static:megatron_ts", "static:metp"], ["dynamic:dp"])
    m = result["policies"]["static:megatron_ts"]
    assert m["measured_total_s"] == pytest.approx(5.0) and m["steps"] == 2 and m["spread"] == pytest.approx(0.3)
    assert m["predicted_total_s"] == pytest.approx(ts["predicted_s"].iloc[1:].sum())
    assert result["ranking"]["measured"] == ["static:megatron_ts", "dynamic:dp", "static:metp"]
    assert result["speedup_over_best_static"]["dynamic:dp"]["measured"] == pytest.approx(1 / 1.5)
    assert result["speedup_over_best_static"]["dynamic:dp"]["best_static_measured"] == "static:megatron_ts"
    # the spread of the runs' totals (steps 2 and 3: 5 s x 0.9 .. 1.2), the median's neighbours
    totals = run_totals(tmp_path, skip=1)
    assert totals["static:megatron_ts"] == pytest.approx((4.5, 6.0)) and totals["static:metp"] == pytest.approx((9, 12))


def test_reproduce_execute_runs_calibrate_then_validate_run(tmp_path, monkeypatch):
    """`reproduce --execute`'s step: the two commands on this machine's defaults, in order, into OUT/execute;
    a failing one stops it with one line (the commands themselves run in the gloo loop case)."""
    import subprocess

    from paradyse_lab.app.reproduce import execute_step
    from paradyse_lab.errors import UserInputError

    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd[3:])
        failed = cmd[-1].endswith("fail") and cmd[3] == "validate-run"
        return subprocess.CompletedProcess(cmd, 1 if failed else 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    execute_step(tmp_path / "execute", log=lambda msg: None)
    out = str(tmp_path / "execute")
    assert calls == [["calibrate", "--out", out], ["validate-run", "--out", out]]
    calls.clear()
    with pytest.raises(UserInputError, match="validate-run failed"):
        execute_step(tmp_path / "fail", log=lambda msg: None)


def test_ablate_costmodel_on_a_measured_profile(tmp_path, capsys):
    """`costmodel ablate --profiles DIR/profile.csv --cluster DIR/cluster.toml` accepts a measured-distributed
    profile of a CPU device (rows here: the measured cluster's analytic times with a per-length wobble)."""
    import json

    import pandas as pd

    from paradyse_lab.costmodel.learned_fit import analytic_whole
    from paradyse_lab.costmodel.profiles import COLUMNS

    (tmp_path / "cluster.toml").write_text(measured_cluster_toml(_measurements()))
    cl = load_cluster_toml(tmp_path / "cluster.toml")
    rows = [{"model": "gpt2-tiny", "h": 96, "heads": 12, "kv_heads": 12, "layers": 4, "p": 2, "strategy": s,
             "recompute": r, "seq_len": n, "batch": 1, "device": "cpu x86_64", "source": "measured-distributed",
             "software": "torch=x", "timestamp": "2026-01-01T00:00:00+00:00"}
            for s in ("megatron_ts", "metp") for r in (False, True) for n in range(8, 8 * 17, 8)]
    df = pd.DataFrame(rows)
    t, m = analytic_whole(df, cl)
    df["time_s"] = t * (1 + 0.05 * np.sin(df["seq_len"]))
    df["peak_bytes"] = m.astype(int)
    df["kept_bytes"] = (m // 2).astype(int)
    df[list(COLUMNS)].to_csv(tmp_path / "profile.csv", index=False)
    code = main(["costmodel", "ablate", "--profiles", str(tmp_path / "profile.csv"), "--cluster",
                 str(tmp_path / "cluster.toml"), "--no-regret", "--cost-models", "analytic,calibrated,residual",
                 "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["profile_source"] == "measured-distributed"
    assert set(out["models"]) == {"analytic", "calibrated", "residual"}
    assert out["models"]["analytic"]["time_mape_interp"] < 0.06  # only the wobble


def test_rankings_agree_unless_a_pair_is_reversed():
    """Policies predicted equal (the same plans) order nothing; a pair predicted one way and measured the
    other breaks the agreement."""
    import pandas as pd

    from paradyse_lab.simulator.replay import compare

    def steps(totals):
        return pd.DataFrame([{"policy": n, "measured_s": m, "predicted_s": p, "counted": True, "plan_match": True,
                              "repeats": 1, "measured_min_s": m, "measured_max_s": m} for n, (m, p) in totals.items()])

    tie = compare(steps({"static:a": (2.0, 2.0), "dynamic:x": (1.0, 1.5), "dynamic:y": (1.2, 1.5)}),
                  ["static:a"], ["dynamic:x", "dynamic:y"])
    assert tie["ranking"]["agree"] and tie["ranking"]["reversed_pairs"] == []
    swap = compare(steps({"static:a": (2.0, 1.0), "static:b": (1.0, 2.0)}), ["static:a", "static:b"], [])
    assert not swap["ranking"]["agree"] and swap["ranking"]["reversed_pairs"] == [["static:a", "static:b"]]
    # a policy the simulation ran out of memory on (no prediction for a step) is not ranked as if it were fast
    oom = compare(steps({"static:a": (2.0, 2.0), "static:b": (1.0, float("nan")), "dynamic:x": (1.5, 1.5)}),
                  ["static:a", "static:b"], ["dynamic:x"])
    assert oom["policies"]["static:b"]["simulated_oom"] and "static:b" not in oom["ranking"]["predicted"]
    assert oom["speedup_over_best_static"]["dynamic:x"]["best_static_simulated"] == "static:a"


def test_a_reversed_pair_counts_against_the_ranking_only_where_the_runs_separate_it():
    import pandas as pd

    from paradyse_lab.simulator.replay import agreement_where_separated, compare

    totals = {"static:a": (2.0, 1.0), "static:b": (1.0, 2.0), "static:c": (3.0, 3.0)}  # (measured, predicted)
    steps = pd.DataFrame([{"policy": n, "measured_s": m, "predicted_s": p, "counted": True, "plan_match": True,
                           "repeats": 3, "measured_min_s": m, "measured_max_s": m} for n, (m, p) in totals.items()])
    result = compare(steps, list(totals), [])
    assert result["ranking"]["reversed_pairs"] == [["static:a", "static:b"]]
    overlapping = {"static:a": (1.8, 2.3), "static:b": (0.9, 1.9), "static:c": (2.9, 3.1)}
    sep = agreement_where_separated(result, overlapping)  # a and b overlap: only a-c and b-c are measured
    assert sep == {"pairs": 3, "separated": 2, "reversed": [], "agree": True}
    apart = {"static:a": (1.95, 2.05), "static:b": (0.95, 1.05), "static:c": (2.9, 3.1)}
    sep = agreement_where_separated(result, apart)
    assert sep["separated"] == 3 and sep["reversed"] == [["static:b", "static:a"]] and not sep["agree"]
    # the runs' totals decide which is faster, not the per-step medians' sum (which can lie outside them):
    # b's runs all ended after a's, so predicting a faster is right although b's medians sum lower
    runs_say_a = {"static:a": (0.5, 0.6), "static:b": (0.9, 1.1), "static:c": (2.9, 3.1)}
    sep = agreement_where_separated(result, runs_say_a)
    assert sep["separated"] == 3 and sep["agree"] and sep["reversed"] == []


def test_calibrate_out_of_budget_before_the_kernels_writes_no_cluster_file(tmp_path, capsys):
    """One rank in this process (a spawned world's error reaching the parent as one line is the launcher's,
    tests/runtime/launcher_cases.py `failing_rank`); a budget spent before the first GEMM's check."""
    from paradyse_lab.cli import main

    argv = ["calibrate", "--out", str(tmp_path / "c"), "--nproc", "1", "--model", "gpt2-tiny", "--max-len", "64",
            "--lengths", "2", "--budget-s", "0.001"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ran out before any" in err[-1]
    assert not (tmp_path / "c" / "cluster.toml").exists()


# ----- the analytic model's step terms on a measured cluster --------------------------------------------------

def _counted_cluster(tmp_path, model="gpt2-tiny", overlap=1.0):
    """A measured cluster file with a launch cost, an overlap fraction and step counts for `model` at p = 2."""
    m = _measurements()
    m.launch_s, m.comm_overlap, m.counted_model = 7e-6, overlap, model
    m.step_counts = {"megatron_ts.attention": (50, 1e5, 300.0), "megatron_ts.mlp": (20, 2e5, 100.0),
                     "metp.attention": (140, 3e5, 500.0), "metp.mlp": (40, 1e5, 200.0),
                     "fixed": (30, 4e5, 60.0), "optimizer": (500, 8e6, 0.0)}
    path = tmp_path / f"counted-{overlap}.toml"
    path.write_text(measured_cluster_toml(m))
    return load_cluster_toml(path)


def test_counted_launches_and_bytes_replace_the_elementwise_formula(tmp_path):
    import dataclasses

    from paradyse_lab.core.layer_graph import LayerGraph
    from paradyse_lab.core.model_spec import get_model
    from paradyse_lab.core.strategies import StrategyOption
    from paradyse_lab.costmodel import AnalyticCostModel
    from paradyse_lab.costmodel.lowering import problem_from_cost_model
    from paradyse_lab.costmodel.schedules import schedule

    cl = _counted_cluster(tmp_path)
    assert cl.launch_s == pytest.approx(7e-6) and cl.counted_model == "gpt2-tiny"
    assert cl.step_counts["optimizer"] == (500, 8e6, 0.0)
    model, seq, ts = get_model("gpt2-tiny"), 256, StrategyOption("megatron_ts")
    counted, plain = AnalyticCostModel(model, cl), AnalyticCostModel(model, dataclasses.replace(cl, step_counts={}))
    formula = schedule(model, "attention", ts, seq, 1, 2).elementwise_bytes / cl.hbm_bytes_per_s
    priced = 50 * 7e-6 + (1e5 + 300.0 * seq) / cl.hbm_bytes_per_s
    delta = counted.sublayer("attention", ts, seq).compute_s - plain.sublayer("attention", ts, seq).compute_s
    assert delta == pytest.approx(priced - formula, rel=1e-9)
    fx = counted.fixed(seq)
    # the counted epilogue and the step's four latency-bound calls: the plan's two broadcasts, two 4-byte all-reduces
    calls = (collective_time_s(cl, "broadcast", 8, 2) + collective_time_s(cl, "broadcast", 1024, 2)
             + 2 * collective_time_s(cl, "all_reduce", 4, 2))
    assert counted.step_calls_s() == pytest.approx(calls) and calls > 0
    assert fx.optimizer_s == pytest.approx(500 * 7e-6 + 8e6 / cl.hbm_bytes_per_s + calls)
    assert plain.fixed(seq).optimizer_s == 0
    problem = problem_from_cost_model(LayerGraph(model), counted, seq, options=[ts])
    assert problem.fixed_time_s == pytest.approx(fx.time_s + fx.optimizer_s)  # the optimizer ends every step
    # counts apply to the model and world size they were taken for only
    other = AnalyticCostModel(get_model("gpt2-cpu"), cl)
    assert other.counted_s("optimizer", seq) is None and AnalyticCostModel(model, cl, p=1).counted_s("fixed", 8) is None


def test_the_runtime_launch_prices_the_model_and_the_chain_launch_the_optimizer(tmp_path):
    import dataclasses

    from paradyse_lab.core.model_spec import get_model
    from paradyse_lab.core.strategies import StrategyOption
    from paradyse_lab.costmodel import AnalyticCostModel

    m = _measurements()
    m.launch_s, m.runtime_launch_s, m.counted_model = 7e-6, 30e-6, "gpt2-tiny"
    m.step_counts = {"megatron_ts.attention": (50, 1e5, 300.0), "megatron_ts.mlp": (20, 2e5, 100.0),
                     "fixed": (30, 4e5, 60.0), "optimizer": (500, 8e6, 0.0)}
    path = tmp_path / "runtime-launch.toml"
    path.write_text(measured_cluster_toml(m))
    cl = load_cluster_toml(path)
    assert cl.runtime_launch_s == pytest.approx(30e-6) and cl.launch_s == pytest.approx(7e-6)
    model, seq, ts = get_model("gpt2-tiny"), 256, StrategyOption("megatron_ts")
    both, chain = AnalyticCostModel(model, cl), AnalyticCostModel(model, dataclasses.replace(cl, runtime_launch_s=0.0))
    for key, launches in (("megatron_ts.attention", 50), ("megatron_ts.mlp", 20), ("fixed", 30)):
        assert both.counted_s(key, seq) - chain.counted_s(key, seq) == pytest.approx(launches * (30e-6 - 7e-6))
    assert both.counted_s("optimizer", seq) == pytest.approx(chain.counted_s("optimizer", seq))
    delta = both.sublayer("mlp", ts, seq).compute_s - chain.sublayer("mlp", ts, seq).compute_s
    assert delta == pytest.approx(20 * 23e-6)
    assert both.fixed(seq).time_s - chain.fixed(seq).time_s == pytest.approx(30 * 23e-6)


def test_a_timed_epilogue_replaces_the_counted_one(tmp_path):
    import dataclasses

    from paradyse_lab.core.model_spec import get_model
    from paradyse_lab.costmodel import AnalyticCostModel

    m = _measurements()
    m.launch_s, m.epilogue_s, m.counted_model = 7e-6, 0.125, "gpt2-tiny"
    m.step_counts = {"fixed": (30, 4e5, 60.0), "optimizer": (500, 8e6, 0.0)}
    path = tmp_path / "epilogue.toml"
    path.write_text(measured_cluster_toml(m))
    cl = load_cluster_toml(path)
    assert cl.epilogue_s == pytest.approx(0.125)
    timed = AnalyticCostModel(get_model("gpt2-tiny"), cl)
    counted = AnalyticCostModel(get_model("gpt2-tiny"), dataclasses.replace(cl, epilogue_s=0.0))
    for seq in (64, 1024):  # the same work at every length
        assert timed.fixed(seq).optimizer_s == pytest.approx(0.125 + timed.step_calls_s())
        assert counted.fixed(seq).optimizer_s == pytest.approx(500 * 7e-6 + 8e6 / cl.hbm_bytes_per_s
                                                               + counted.step_calls_s())
        assert timed.fixed(seq).time_s == counted.fixed(seq).time_s
    # timed for the counted model at the counted p only, as the counts
    assert AnalyticCostModel(get_model("gpt2-cpu"), cl).fixed(64).optimizer_s == 0


def test_every_collective_call_pays_the_measured_sync(tmp_path):
    import dataclasses

    from paradyse_lab.core.model_spec import get_model
    from paradyse_lab.core.strategies import StrategyOption
    from paradyse_lab.costmodel import AnalyticCostModel, CollectiveCall

    m = _measurements()
    m.collective_sync_s, m.counted_model = 1e-3, "gpt2-tiny"
    m.step_counts = {"fixed": (30, 4e5, 60.0), "optimizer": (500, 8e6, 0.0)}
    path = tmp_path / "sync.toml"
    path.write_text(measured_cluster_toml(m))
    cl = load_cluster_toml(path)
    assert cl.collective_sync_s == pytest.approx(1e-3)
    model, seq = get_model("gpt2-tiny"), 256
    synced = AnalyticCostModel(model, cl)
    plain = AnalyticCostModel(model, dataclasses.replace(cl, collective_sync_s=0.0))
    call = CollectiveCall("all_gather", 1 << 16, 2, count=3)
    assert synced.collective_s(call) - plain.collective_s(call) == pytest.approx(3e-3)
    assert synced.step_calls_s() - plain.step_calls_s() == pytest.approx(4e-3)  # two broadcasts, two all-reduces
    for option in (StrategyOption("megatron_ts"), StrategyOption("ulysses_z")):  # every call blocking
        a, b = synced.sublayer("attention", option, seq), plain.sublayer("attention", option, seq)
        calls = sum(c.count for c in a.collectives)
        assert calls > 0 and a.time_s - b.time_s == pytest.approx(calls * 1e-3) and a.compute_s == b.compute_s
    assert AnalyticCostModel(model, cl, p=1).collective_s(CollectiveCall("all_reduce", 4, 1)) == 0.0


def test_ring_overlap_fraction_runs_point_to_point_after_compute(tmp_path):
    from paradyse_lab.core.model_spec import get_model
    from paradyse_lab.core.strategies import StrategyOption
    from paradyse_lab.costmodel import AnalyticCostModel

    model, metp = get_model("gpt2-tiny"), StrategyOption("metp")
    hides = AnalyticCostModel(model, _counted_cluster(tmp_path, overlap=1.0)).sublayer("mlp", metp, 256)
    serial = AnalyticCostModel(model, _counted_cluster(tmp_path, overlap=0.0)).sublayer("mlp", metp, 256)
    cl = _counted_cluster(tmp_path)
    comm = {flag: sum(c.count * collective_time_s(cl, c.op, c.buffer_bytes, c.ranks)
                      for c in serial.collectives if c.overlapped == flag) for flag in (True, False)}
    assert comm[True] > 0 and serial.compute_s == pytest.approx(hides.compute_s)
    assert serial.time_s == pytest.approx(serial.compute_s + comm[True] + comm[False], rel=1e-9)
    assert serial.time_s > hides.time_s


def test_bad_step_terms_in_a_cluster_file(tmp_path):
    from paradyse_lab.errors import UserInputError

    for text, match in (("comm_overlap = 1.5\n", "comm_overlap must be a number in"),
                        ("launch_us = -1\n", "launch_us must be"),
                        ("runtime_launch_us = -1\n", "runtime_launch_us must be"),
                        ("collective_sync_us = -1\n", "collective_sync_us must be"),
                        ("epilogue_ms = -1\n", "epilogue_ms must be"),
                        ('[step_counts]\n"fixed" = [1, 2]\n', "step_counts.fixed must be")):
        path = tmp_path / "c.toml"
        path.write_text('base = "a100-80gb-x8"\n' + text)
        with pytest.raises(UserInputError, match=match):
            load_cluster_toml(path)


def test_validate_run_defaults_come_from_a_measured_folder(tmp_path):
    """A folder `calibrate` wrote (cluster.toml and profile.csv): the calibrated model, 3 repeats; else analytic."""
    import argparse
    import json

    from paradyse_lab.cli import validate_run_command as cmd
    from paradyse_lab.costmodel.synthetic import synthesize_profiles

    parser = argparse.ArgumentParser()
    cmd.register(parser.add_subparsers())
    bare = cmd._options(parser.parse_args(["validate-run", "--out", str(tmp_path / "bare"), "--nproc", "2"]))
    assert bare.cost_model == "analytic" and bare.repeats == cmd.DEFAULT_REPEATS == 3
    out = tmp_path / "measured"
    out.mkdir()
    cl = _counted_cluster(tmp_path)
    (out / "cluster.toml").write_text((tmp_path / "counted-1.0.toml").read_text())
    (out / "calibrate.json").write_text(json.dumps({"settings": {"nproc": 2, "model": "gpt2-tiny", "max_len": 256}}))
    synthesize_profiles(cl, ("gpt2-tiny",), 2, max_len=1024, ratio=1.5).to_csv(out / "profile.csv", index=False)
    opts = cmd._options(parser.parse_args(["validate-run", "--out", str(out)]))
    assert opts.cost_model == "calibrated" and opts.repeats == 3 and opts.nproc == 2
    assert opts.cluster.endswith("cluster.toml") and opts.profiles.endswith("profile.csv")
    explicit = cmd._options(parser.parse_args(["validate-run", "--out", str(out), "--cost-model", "analytic",
                                               "--repeats", "1"]))
    assert explicit.cost_model == "analytic" and explicit.repeats == 1
