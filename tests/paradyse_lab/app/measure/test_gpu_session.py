"""paradyse_lab/app/measure/gpu_session.py on CPU (`--quick --device cpu --models bert-tiny`: the paper's bert layer
at h 128, one layer at p = 8; every stage runs as with `--quick` alone, on a layer a sixty-fourth the size of bert's):
every file with its documented columns, profiles that read back, the budget stopping the run cleanly, and
paradyse_lab/app/measure/gpu_validate.py's table from those outputs.

Run: `python -m pytest -q tests/paradyse_lab/app/measure/test_gpu_session.py` (about 10 s: the kernels stage's traces
and the profiles; the nested pytest of tests/gpu imports no torch on a machine without a GPU device).
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import time
from dataclasses import replace

import pytest

from paradyse_lab.app.measure import gpu_session, gpu_session_stages, gpu_validate
from paradyse_lab.app.measure.kernel_bench import ATTENTION_COLUMNS, GEMM_COLUMNS
from paradyse_lab.app.measure.stack_profile import EXTRA_COLUMNS
from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import USABLE, StrategyOption
from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.costmodel.profiles import COLUMNS, read_profiles

MODEL = "bert-tiny"
"""The profiled model: bert's layer (16 heads, 2 per rank at p = 8), narrower."""
PROFILE = f"cpu_{MODEL}.csv"


def _header(path) -> tuple[str, ...]:
    with open(path, newline="") as f:
        return tuple(next(csv.reader(f)))


@pytest.fixture(scope="module")
def session_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_session")
    with pytest.MonkeyPatch.context() as mp:  # the kernels stage's traces: this module's, not the user's cache
        mp.setenv("PARADYSE_TRACE_CACHE", str(tmp_path_factory.mktemp("traces")))
        assert gpu_session.main(["--out", str(out), "--quick", "--device", "cpu", "--models", MODEL]) == 0
        yield out


def test_every_file_is_written_with_its_columns(session_dir):
    names = sorted(p.name for p in session_dir.iterdir())
    assert names == sorted(["env.json", "session_log.json", "pytest_gpu.txt", "gemm.csv", "attention.csv", PROFILE,
                            "kernels"])
    assert _header(session_dir / "gemm.csv") == GEMM_COLUMNS
    assert _header(session_dir / "attention.csv") == ATTENTION_COLUMNS
    assert _header(session_dir / PROFILE) == COLUMNS + EXTRA_COLUMNS
    env = json.loads((session_dir / "env.json").read_text())
    assert env["device"] == "cpu" and env["versions"]["torch"] and env["dtype"] == "float32"
    pytest_gpu = (session_dir / "pytest_gpu.txt").read_text()
    assert pytest_gpu.strip().endswith("exit code: 0")
    # tests/gpu run without the hypothesis and xdist plugins they do not use (~1.3 CPU s of imports less)
    assert pytest_gpu.splitlines()[0] == "$ python " + " ".join(gpu_session_stages.PYTEST_GPU)
    assert "-p no:hypothesispytest" in pytest_gpu.splitlines()[0]
    log = json.loads((session_dir / "session_log.json").read_text())
    assert [(s["name"], s["status"]) for s in log["stages"]] == [(n, "ok") for n in gpu_session.QUICK_STAGES]
    with open(session_dir / "attention.csv", newline="") as f:
        att = list(csv.DictReader(f))
    assert {(r["causal"], r["kernel"]) for r in att} == {("true", "sdpa-cpu"), ("false", "sdpa-cpu")}
    assert all(float(r["fwd_s"]) > 0 and float(r["bwd_s"]) > 0 and r["efficiency"] == "" for r in att)


def test_kernels_stage_records_the_replay_tables_of_the_traced_layer(session_dir):
    """DIR/kernels/ (the GPU's replay tables; here the CPU's): read by the replay model, every GEMM and attention
    call the runtime's trace issues for the profiled layer at p = 8 in them, and a traced layer priced with
    the measured dispatch cost."""
    from paradyse_lab.app.measure.replay_tables import read_rows
    from paradyse_lab.app.replay_traces import SublayerTraces
    from paradyse_lab.costmodel.replay.price import critical_path, measured_prices
    from paradyse_lab.costmodel.replay.tables import KernelTables

    folder = session_dir / "kernels"
    assert sorted(p.name for p in folder.iterdir()) == ["attention.csv", "dispatch.csv", "dispatch.toml",
                                                        "elementwise.csv", "gemm.csv"]
    prices = measured_prices(KernelTables.read(folder), get_cluster("a100-80gb-x8"))
    assert prices.serial and prices.dispatch_s > 0  # a CPU's host runs its kernels
    gemms = {(int(r["m"]), int(r["n"]), int(r["k"])) for r in read_rows(folder / "gemm.csv")}
    option = StrategyOption(gpu_session.QUICK.replay_strategies[0])
    traces = SublayerTraces(replace(get_model(MODEL), dtype="fp32"), 8, "cpu")
    for s in gpu_session.QUICK.lengths:
        ops = traces.trace("attention", option, s) + traces.trace("mlp", option, s)
        assert {(o.m, o.n, o.k) for o in ops if o.kind == "gemm"} <= gemms
        assert critical_path(ops, prices).time_s > 0


def test_profiles_read_back_and_keep_what_the_analytic_model_counts(session_dir):
    df = read_profiles(session_dir / PROFILE)
    assert set(df["source"]) == {"measured-rank-local"} and set(df["device"]) == {"cpu"}
    assert (df["p"] == 8).all() and (df["layers"] == 1).all() and (df["time_s"] > 0).all()
    for name in USABLE:  # keep pass at 64 and 128, the fill pass at 96; recompute at 64 and 128
        assert sorted(df[(df["strategy"] == name) & ~df["recompute"]]["seq_len"]) == [64, 96, 128]
        assert sorted(df[(df["strategy"] == name) & df["recompute"]]["seq_len"]) == [64, 128]
    cm = AnalyticCostModel(replace(get_model(MODEL), dtype="fp32", layers=1), get_cluster("a100-80gb-x8"), 8)
    for r in df.itertuples():
        opt = StrategyOption(r.strategy, bool(r.recompute))
        assert r.kept_bytes == sum(cm.sublayer(k, opt, r.seq_len).kept_bytes for k in ("attention", "mlp"))


def test_a_spent_budget_skips_every_stage_and_writes_no_csv(tmp_path):
    assert gpu_session.main(["--out", str(tmp_path), "--quick", "--device", "cpu", "--budget-s", "0"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["env.json", "session_log.json"]  # no CSV, no temp file
    log = json.loads((tmp_path / "session_log.json").read_text())
    stages = {s["name"]: s for s in log["stages"]}
    assert stages["env"]["status"] == "ok"
    for name in gpu_session.QUICK_STAGES[1:]:
        assert stages[name]["status"] == "skipped" and stages[name]["reason"].startswith("time budget")
    assert "peers" not in stages  # --quick leaves the peer benchmark out unless --stages names it


def test_the_peers_stage_runs_the_peer_benchmark_and_keeps_its_csv(tmp_path, monkeypatch):
    """The stage's command is examples/peer_benchmark.py at the plan's lengths and repeats, writing peers.csv
    (the benchmark itself is replaced here by a stand-in that writes its --out file: a real run spawns gloo worlds)."""

    seen = []

    def fake_run(cmd, **kwargs):
        seen.append(cmd)
        out = cmd[cmd.index("--out") + 1]
        with open(out, "w") as f:
            f.write("p,seq_len\n2,64\n")
        return subprocess.CompletedProcess(cmd, 0, "ours | peer\n", "")

    monkeypatch.setattr(gpu_session_stages.subprocess, "run", fake_run)
    assert gpu_session.main(["--out", str(tmp_path), "--quick", "--device", "cpu", "--stages", "peers"]) == 0
    assert seen and seen[0][1:6] == ["examples/peer_benchmark.py", "--lengths", "64", "--repeats", "1"]
    assert (tmp_path / "peers.csv").read_text().startswith("p,seq_len")
    log = json.loads((tmp_path / "session_log.json").read_text())
    stage = {s["name"]: s for s in log["stages"]}["peers"]
    assert stage["status"] == "ok" and stage["files"] == ["peers.csv"]


def test_a_curve_past_its_deadline_records_skipped_lengths():
    import torch

    from paradyse_lab.app.measure.stack_profile import LayerStack, predict_step_s, profile_curve

    stack = LayerStack(get_model("bert").with_layers(1), 8, torch.device("cpu"), torch.float32)
    res = profile_curve(stack, StrategyOption("metp"), [64, 128], time.perf_counter() + 5.0, known={64: 100.0})
    assert res["points"] == {} and res["skipped"] == [[64, "time budget"], [128, "time budget"]]
    assert predict_step_s({1024: 1.0, 2048: 4.0}, 4096) == pytest.approx(1.2 * 16.0)  # s^2 growth, +20%
    assert predict_step_s({1024: 1.0, 2048: 2.0}, 4096) == pytest.approx(1.2 * 4.0)  # linear growth


def test_device_kind_names_files_and_presets():
    assert gpu_session.device_kind("NVIDIA H100 80GB HBM3", 81559 * 2**20) == ("h100-80gb", "h100-80gb-x8")
    assert gpu_session.device_kind("NVIDIA H200", 143771 * 2**20) == ("h200", "h200-x8")
    assert gpu_session.device_kind("NVIDIA A100-SXM4-40GB", 40 * 2**30) == ("a100-40gb", "a100-40gb-x8")
    assert gpu_session.device_kind("cpu", 0) == ("cpu", None)


def test_gpu_validate_builds_its_table_from_the_outputs(session_dir, tmp_path, capsys):
    assert gpu_validate.main([str(session_dir), "--out", str(tmp_path), "--combine", str(tmp_path / "all.csv")]) == 0
    assert _header(tmp_path / "validation.csv") == gpu_validate.TABLE_COLUMNS
    with open(tmp_path / "validation.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(read_profiles(session_dir / PROFILE))
    for r in table:
        for col in ("time_ratio", "time_ratio_measured_eff", "mem_ratio"):
            assert math.isfinite(float(r[col])) and float(r[col]) > 0
        assert r["peak_method"] == "lower-bound-cpu"
    assert "| model | strategy | s |" in (tmp_path / "validation.md").read_text()
    assert len(read_profiles(tmp_path / "all.csv")) == len(table)
    printed = capsys.readouterr().out
    assert "gemm_efficiency measured" in printed and "attention_efficiency_causal measured" in printed


def test_measure_times_at_most_the_cap_of_calls():
    """`kernel_bench.REPEATS_CAP` (the tests of what calibrate writes set it): the warm-up calls, then at most the
    cap's timed calls whatever `min_repeats`; unset, `min_repeats` of them."""
    import torch

    from paradyse_lab.app.measure import kernel_bench

    calls = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernel_bench, "TARGET_SCALE", 0.0)
        mp.setattr(kernel_bench, "REPEATS_CAP", 1)
        assert kernel_bench.measure(lambda: calls.append(1), torch.device("cpu"), warmup=2, min_repeats=5)[1] == 1
        assert len(calls) == 3
        mp.setattr(kernel_bench, "REPEATS_CAP", None)
        assert kernel_bench.measure(lambda: calls.append(1), torch.device("cpu"), warmup=2, min_repeats=5)[1] == 5
        assert len(calls) == 3 + 7
