"""Where the replay cost model prices by default: `auto` is replay where the cluster has kernel tables (bundled,
or a `kernels/` folder beside its cluster file) and analytic, labelled why, elsewhere; the model prices each
sub-layer from its trace on the critical path (memory analytic), a packed step's attention per document, and
`cost` says which model priced each number. The experiments that reproduce the paper keep the analytic model.

Most cases install a small fake trace source (no torch, instant); one traces a tiny model's layer with the
runtime's own code. Run: `python -m pytest -q tests/paradyse_lab/costmodel/test_replay_default.py`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from unittest import mock

import pytest

import paradyse_lab.app  # noqa: F401  (installs the runtime's tracer)
from paradyse_lab.app.train_options import TrainOptions
from paradyse_lab.app.training import plan_policy
from paradyse_lab.cli import main
from paradyse_lab.cli.simulate_options import SimulationOptions
from paradyse_lab.cli.validate_run_command import default_cost_model
from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.costmodel.factory import build_cost_model, priced_by, resolve_cost_model
from paradyse_lab.costmodel.replay import model as replay_model
from paradyse_lab.costmodel.replay.ops import Op
from paradyse_lab.costmodel.replay.price import Prices, critical_path
from paradyse_lab.costmodel.replay.tables import BUNDLED, bundled_tables
from paradyse_lab.errors import UserInputError

H100 = get_cluster("h100-80gb-x8")
A100 = get_cluster("a100-80gb-x8")
TS = StrategyOption("megatron_ts", False)


class FakeTraces:
    """One GEMM, one attention call over the rank's whole sequence and one element-wise kernel per sub-layer."""

    def __init__(self, spec, p, device):
        self.spec, self.p, self.device = spec, p, device

    def trace(self, kind, option, seq_len, batch=1):
        h = self.spec.hidden
        ops = [Op("gemm", "mm", "bfloat16", m=seq_len, n=h // self.p, k=h), Op("elementwise", "add", nbytes=seq_len)]
        if kind == "attention":
            ops.append(Op("attention", "attention", "bfloat16", sq=seq_len, sk=seq_len, heads=2, kv_heads=2,
                          head_dim=64, causal=True, which="forward"))
        return ops


@pytest.fixture
def fake_traces(monkeypatch):
    monkeypatch.setattr(replay_model, "_TRACE_SOURCE", [FakeTraces])


def test_auto_is_replay_where_the_cluster_has_tables_else_analytic_labelled():
    assert resolve_cost_model("auto", H100) == "replay"
    assert resolve_cost_model("auto", A100) == "analytic"
    assert resolve_cost_model("analytic", H100) == "analytic"  # a forced choice stays
    cm = build_cost_model("auto", get_model("gpt"), A100)  # its tables are spec-derived: only asked for by name
    assert isinstance(cm, AnalyticCostModel)
    assert cm.label.startswith("analytic (auto: the a100-80gb-x8 kernel tables are spec-derived, not measured")
    cm = build_cost_model("auto", get_model("gpt"), get_cluster("a100-40gb-x8"))
    assert cm.label.startswith("analytic (auto: no kernel tables for 'a100-40gb-x8'")
    with pytest.raises(UserInputError, match="cost model 'replay' on a100-40gb-x8: no kernel tables"):
        build_cost_model("replay", get_model("gpt"), get_cluster("a100-40gb-x8"))


def test_a_measured_folder_prices_with_its_own_tables(tmp_path, fake_traces):
    (tmp_path / "kernels").mkdir()
    for name in ("gemm.csv", "attention.csv"):
        shutil.copy(BUNDLED / "h100-80gb-x8" / name, tmp_path / "kernels" / name)
    (tmp_path / "cluster.toml").write_text('base = "a100-80gb-x8"\nlaunch_us = 9.5\n')
    cluster = get_cluster(str(tmp_path / "cluster.toml"))
    assert cluster.kernels == str(tmp_path / "kernels")
    cm = build_cost_model("auto", get_model("gpt"), cluster)
    assert cm.name == "replay" and cm.host.dispatch_s == pytest.approx(9.5e-6) and cm.host.sublayer_ops == 0
    assert str(tmp_path / "kernels") in cm.label
    (tmp_path / "kernels" / "dispatch.toml").write_text('dispatch_us = 3.0\nsublayer_ops = 5\nsource = "here"\n')
    cm = build_cost_model("auto", get_model("gpt"), cluster)
    assert (cm.host.dispatch_s, cm.host.sublayer_ops) == (pytest.approx(3e-6), 5)
    (tmp_path / "kernels" / "dispatch.toml").write_text("dispatch_us = -1\n")
    with pytest.raises(UserInputError, match="dispatch_us must be a number of microseconds > 0"):
        build_cost_model("auto", get_model("gpt"), cluster)
    (tmp_path / "kernels" / "dispatch.toml").unlink()
    (tmp_path / "cluster.toml").write_text('base = "a100-80gb-x8"\n')  # no measured launch cost: no replay
    assert resolve_cost_model("auto", get_cluster(str(tmp_path / "cluster.toml"))) == "analytic"
    assert default_cost_model(tmp_path) == "replay"  # validate-run on a measured folder with tables


def test_replay_prices_the_trace_on_the_critical_path_and_keeps_analytic_memory(fake_traces):
    spec = get_model("gpt")
    cm = build_cost_model("replay", spec, H100)
    analytic = AnalyticCostModel(spec, H100)
    got, base = cm.sublayer("attention", TS, 4096), analytic.sublayer("attention", TS, 4096)
    ops = [replay_model.PASS] * cm.host.sublayer_ops + FakeTraces(spec, 8, "cuda").trace("attention", TS, 4096)
    prices = Prices(bundled_tables("h100-80gb-x8"), H100, cm.host.dispatch_s)
    want = critical_path(ops * 2, prices).time_s - critical_path(ops, prices).time_s
    assert got.time_s == pytest.approx(want, rel=1e-12) and got.time_s != base.time_s
    assert (got.kept_bytes, got.transient_bytes, got.model_state_bytes) == (
        base.kept_bytes, base.transient_bytes, base.model_state_bytes)
    assert cm.fixed(4096) == analytic.fixed(4096)
    assert priced_by(cm) == {"layer_time": "replay", "memory": "analytic", "embedding_and_head": "analytic"}


def test_a_packed_steps_attention_is_priced_per_document(fake_traces):
    cm = build_cost_model("replay", get_model("gpt"), H100)
    s = 16384
    dense = cm.sublayer("attention", TS, s)
    assert cm.sublayer("attention", TS, s, segments=(s,)).time_s == dense.time_s  # one document: the dense step
    halves = cm.sublayer("attention", TS, s, segments=(s // 2, s // 2)).time_s
    eighths = cm.sublayer("attention", TS, s, segments=(s // 8,) * 8).time_s
    assert eighths < halves < dense.time_s
    mlp = cm.sublayer("mlp", TS, s)  # no attention: packing changes nothing
    assert cm.sublayer("mlp", TS, s, segments=(s // 8,) * 8).time_s == mlp.time_s
    call = FakeTraces(get_model("gpt"), 8, "cuda").trace("attention", TS, s)[-1]
    varlen = replay_model.with_documents(call, s, (s // 2, s // 2))
    assert varlen.key_pairs == 2 * (s // 2) ** 2 and varlen.flops == pytest.approx(call.flops / 2)


def test_cost_says_which_model_priced_each_number(fake_traces, capsys):
    assert main(["cost", "--model", "gpt", "--seq", "4096", "--cluster", "h100-80gb-x8", "--strategies",
                 "megatron_ts", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cost_model"].startswith("replay (bundled h100-80gb-x8 tables")
    assert out["priced_by"] == {"layer_time": "replay", "memory": "analytic", "embedding_and_head": "analytic"}
    assert main(["cost", "--model", "gpt", "--seq", "4096", "--strategies", "megatron_ts"]) == 0
    text = capsys.readouterr().out
    assert "cost model analytic (auto: the a100-80gb-x8 kernel tables are spec-derived" in text
    assert "priced by: layer time analytic, memory analytic, embedding and head analytic" in text


def test_simulate_plans_with_replay_by_default_and_experiment_keeps_the_analytic_model(fake_traces, capsys):
    assert main(["simulate", "--model", "gpt", "--dataset", "uniform:512:4096", "--size", "3", "--policy",
                 "dynamic:dp", "--cluster", "h100-80gb-x8"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^plan cost model +replay$", out, re.M) and re.search(r"^truth cost model +replay$", out, re.M)
    assert SimulationOptions().setup().truth == "analytic"  # experiment and reproduce: the paper's model
    assert SimulationOptions().setup(cost_model="auto").truth == "auto"  # simulate
    assert TrainOptions.__dataclass_fields__["cost_model"].default == "auto"


def test_train_plans_with_replay_on_a_cluster_with_tables(fake_traces):
    with mock.patch("paradyse_lab.simulator.planner.build_policy") as build:
        plan_policy(TrainOptions(model="gpt2-tiny", dataset="uniform:8:16", cluster="h100-80gb-x8"),
                    get_model("gpt2-tiny"), 2, quiet=True)
    assert build.call_args.args[2].name == "replay"
    with mock.patch("paradyse_lab.simulator.planner.build_policy") as build:
        plan_policy(TrainOptions(model="gpt2-tiny", dataset="uniform:8:16"), get_model("gpt2-tiny"), 2, quiet=True)
    assert build.call_args.args[2].name == "analytic"  # the CPU host of the default preset: no tables


def test_the_runtimes_own_trace_prices_a_tiny_layer(tmp_path, monkeypatch):
    monkeypatch.setenv("PARADYSE_TRACE_CACHE", str(tmp_path))
    spec = dataclasses.replace(get_model("gpt"), name="tiny", hidden=128, heads=2, kv_heads=2, ffn_hidden=512,
                               layers=2, vocab_size=256)
    cm = build_cost_model("auto", spec, H100, p=2)
    short, long = (cm.sublayer("attention", TS, s).time_s for s in (256, 131072))
    assert 0 < short < long
    assert cm.traces.traced == 3  # one shape class, three lengths: every other length without tracing
