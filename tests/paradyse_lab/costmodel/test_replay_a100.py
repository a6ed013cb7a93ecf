"""The replay model on the A100: the bundled spec-derived tables (what the derivation writes, between the H100's
times and the peak ratio, labelled as not measured), a step priced with them and the fitted per-call costs, the
vectorised critical path the per-call costs are fitted with, and leave-one-shape-out fitting without the shape.

Run: `python -m pytest -q tests/paradyse_lab/costmodel/test_replay_a100.py` (no torch, no tracing; fake traces).
"""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pandas as pd
import pytest

from paradyse_lab.app.replay_ablation import _loso
from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel import factory
from paradyse_lab.costmodel.replay import model as replay_model
from paradyse_lab.costmodel.replay.call_costs import PASS, CallCostGrid, CallCosts, critical_path_many, fit_call_costs
from paradyse_lab.costmodel.replay.ops import Op
from paradyse_lab.costmodel.replay.price import Prices, critical_path
from paradyse_lab.costmodel.replay.spec_tables import a100_tables
from paradyse_lab.costmodel.replay.tables import BUNDLED, bundled_tables

A100 = get_cluster("a100-80gb-x8")
TABLES = bundled_tables("a100-80gb-x8")
H100_TABLES = bundled_tables("h100-80gb-x8")
PEAK_RATIO = 989 / 312


def test_the_bundled_a100_tables_are_what_the_derivation_writes():
    for name, text in a100_tables(BUNDLED).items():
        assert (BUNDLED / "a100-80gb-x8" / name).read_text() == text, name


def test_a100_tables_are_labelled_derived_and_lie_between_the_h100_and_the_a100_best():
    assert TABLES.derived and "spec-derived, not measured" in TABLES.source
    rows = pd.read_csv(BUNDLED / "a100-80gb-x8" / "gemm.csv")
    assert set(rows["source"]) == {"spec-derived"} and set(rows["cluster"]) == {"a100-80gb-x8"}
    for r in rows.itertuples():
        op = Op("gemm", "mm", r.dtype, m=r.m, n=r.n, k=r.k)
        a100, h100 = TABLES.gemm.seconds(op), H100_TABLES.gemm.seconds(op)
        assert a100 >= max(h100, op.flops / (312e12 * 0.869)) and a100 <= h100 * PEAK_RATIO, (r.m, r.n, r.k)
    assert rows["efficiency"].max() <= 0.8693  # never above the best bf16 matmul measured on an A100 (86.9%)
    attention = pd.read_csv(BUNDLED / "a100-80gb-x8" / "attention.csv")
    longest = attention[attention["seq_len"] == attention["seq_len"].max()]
    for r in longest.itertuples():  # FlashAttention-2's A100 efficiency at 16k tokens and beyond, floors aside
        d64 = 179.5 / 191.6 if r.head_dim == 64 else 1.0  # flash-attn's d = 64 over d = 128 at 8k tokens
        assert r.efficiency == pytest.approx((189 if r.causal else 203) / 312 * d64, rel=0.01)


class FakeTraces:
    """One GEMM, one all_gather of the layer's weights over 8 ranks and one attention call per sub-layer."""

    def __init__(self, spec, p, device):
        self.spec, self.p = spec, p

    def trace(self, kind, option, seq_len, batch=1):
        h = self.spec.hidden
        return [Op("gemm", "mm", "bfloat16", m=seq_len, n=h // self.p, k=h),
                Op("collective", "all_gather", nbytes=2 * h * h, group=self.p),
                Op("attention", "attention", "bfloat16", sq=seq_len, sk=seq_len, heads=2, kv_heads=2, head_dim=128,
                   which="forward")]


def test_replay_prices_a_step_with_the_a100_tables_and_the_fitted_call_costs(monkeypatch):
    monkeypatch.setattr(replay_model, "_TRACE_SOURCE", [FakeTraces])
    assert factory.resolve_cost_model("auto", A100) == "analytic"  # derived tables: by name only
    cm = factory.build_cost_model("replay", get_model("gpt"), A100)
    assert "spec-derived, not measured" in cm.label and "fitted" in cm.host.source
    assert cm.host.collective_s > 0 and cm.prices.cluster.collective_sync_s == cm.host.collective_s
    opt = StrategyOption("megatron_ts", False)
    ops = [replay_model.PASS] * cm.host.sublayer_ops + FakeTraces(cm.model, 8, "cuda").trace("mlp", opt, 4096)
    one = critical_path(ops, cm.prices)
    two = critical_path(ops * 2, cm.prices)
    assert cm.sublayer("mlp", opt, 4096).time_s == pytest.approx(two.time_s - one.time_s)
    bare = Prices(TABLES, A100, cm.host.dispatch_s)  # without the per-call collective cost: cheaper by it
    assert critical_path(ops, cm.prices).comm_s == pytest.approx(critical_path(ops, bare).comm_s
                                                                   + cm.host.collective_s)


def _random_ops(seed: int, n: int = 300) -> list[Op]:
    rng, ops, ref = random.Random(seed), [], 0
    for _ in range(n):
        r = rng.random()
        if r < .3:
            ops.append(Op("gemm", "mm", "bfloat16", m=rng.choice([512, 4096, 32768]), n=1024, k=1024))
        elif r < .45:
            ops.append(Op("elementwise", "add", nbytes=rng.choice([1000, 10**8])))
        elif r < .6:
            ops.append(Op("host", "view"))
        elif r < .65:
            ops.append(PASS)
        elif r < .72:
            ops.append(Op("collective", "all_gather", nbytes=rng.choice([0, 10**6, 10**9]), group=rng.choice([1, 8])))
        elif r < .8:
            ref += 1
            ops.append(Op("p2p", "exchange", nbytes=rng.choice([0, 10**7]), group=8, ref=ref))
        elif r < .88 and ref:
            ops.append(Op("wait", "wait", ref=rng.randint(1, ref)))
        elif r < .92:
            ops.append(Op("host", "_local_scalar_dense"))
        else:
            ops.append(Op("attention", "a", sq=4096, sk=4096, heads=8, kv_heads=8, head_dim=128, which="forward"))
    return ops


@pytest.mark.parametrize("seed", [0, 1])
def test_the_vectorised_critical_path_is_the_critical_path_at_every_setting(seed):
    ops = _random_ops(seed)
    k, d, a = np.array([0.0, 3, 5, 0]), np.array([1e-6, 5e-6, 3e-5, 2e-4]), np.array([0.0, 1e-5, 3e-4, 2e-3])
    base = Prices(TABLES, A100, 0.0)
    got = critical_path_many(ops, [base.device_s(op) for op in ops], k, d, a)
    for i in range(len(k)):
        expanded = [x for op in ops for x in ([Op("host", "python")] * int(k[i]) if op is PASS else [op])]
        prices = Prices(TABLES, dataclasses.replace(A100, collective_sync_s=a[i]), d[i])
        assert got[i] == pytest.approx(critical_path(expanded, prices).time_s, rel=1e-12)


def test_a_cost_between_grid_points_is_bracketed_as_numpy_searchsorted_brackets_it():
    """The fit's interpolation finds a cost's grid interval with `bisect` (the fit's loss runs thousands of
    times): the same interval and weight as numpy's `searchsorted` and `clip`, on and between grid points, and
    beyond both ends."""
    from paradyse_lab.costmodel.replay.call_costs import COLLECTIVE, DISPATCH, _bracket

    rng = random.Random(0)
    for grid in (DISPATCH, COLLECTIVE):
        xs = [*grid, -1.0, 0.0, grid[0] / 2, grid[-1] * 2, *(rng.uniform(0, 1.2 * grid[-1]) for _ in range(500)),
              *(10 ** rng.uniform(-7, -2) for _ in range(500))]
        for x in xs:
            i = int(np.clip(np.searchsorted(grid, x) - 1, 0, len(grid) - 2))
            assert _bracket(grid, x) == (i, min(max((x - grid[i]) / (grid[i + 1] - grid[i]), 0.0), 1.0))


def _layer(gemm_m: int, gathers: int, views: int) -> list[Op]:
    """A layer with a given mix of compute, collectives and host-only operations (what makes the costs separable)."""
    return ([PASS] + [Op("gemm", "mm", "bfloat16", m=gemm_m, n=1024, k=1024)] * 4
            + [Op("collective", "all_gather", nbytes=10**6, group=8)] * gathers + [Op("host", "view")] * views)


def test_fit_call_costs_recovers_the_costs_that_made_the_steps():
    grid = CallCostGrid(Prices(TABLES, A100, 0.0))
    layers = [_layer(m, g, v) for m in (512, 8192, 65536) for g in (0, 4, 16) for v in (10, 200)]
    truth = CallCosts(64, 7.5e-6, 3.0e-4)
    measured = [critical_path_many(ops, [grid.prices.device_s(op) for op in ops], np.array([64.0]),
                                   np.array([truth.dispatch_s]), np.array([truth.collective_s]))[0] for ops in layers]
    for ops in layers:
        grid.add(ops, 1)
    got = fit_call_costs(grid, measured)
    assert got.sublayer_ops == truth.sublayer_ops
    assert got.dispatch_s == pytest.approx(truth.dispatch_s, rel=0.02)
    assert got.collective_s == pytest.approx(truth.collective_s, rel=0.02)


class RecordingFit:
    """A fitter that remembers the rows it was fitted on and predicts each row as the mean of those rows."""

    def __init__(self, t: np.ndarray):
        self.t, self.fitted_on = t, []

    def fit(self, measured, index):
        self.fitted_on.append(set(index.tolist()))
        return CallCosts(0, float(np.mean(measured)), 0.0)

    def times(self, costs, index):
        return np.full(len(index), costs.dispatch_s)


def test_leave_one_shape_out_never_fits_on_the_held_out_shape():
    rows = [{"h": h, "heads": 16, "kv_heads": 16, "layers": 4, "p": 8, "strategy": s, "seq_len": n,
             "time_s": h * 1e-3 + n * 1e-6} for h in (1024, 2048, 4096) for s in ("megatron_ts", "metp")
            for n in (512, 4096, 65536)]
    df = pd.DataFrame(rows)
    fit = RecordingFit(df["time_s"].to_numpy())
    got = _loso(df, fit)
    assert len(fit.fitted_on) == 3
    for h, used in zip((1024, 2048, 4096), fit.fitted_on):
        held = set(np.flatnonzero(df["h"] == h).tolist())
        assert not used & held and used | held == set(range(len(df)))
        others = df["time_s"][df["h"] != h].mean()  # the held-out shape predicted from the others alone
        assert got["call_costs"][f"{h}/16/16/4/8"].dispatch_s == pytest.approx(others)
    assert set(got["by_strategy"]) == {"megatron_ts", "metp"} and got["time_mape_leave_one_shape_out"] > 0



class FakeLayerTraces:
    """`SublayerTraces`' interface with a fixed small sub-layer: GEMMs, an all_gather of the weights, attention."""

    def __init__(self, spec, p, device="cuda"):
        self.spec, self.p, self.trace_s, self.traced = spec, p, 0.0, 0

    def trace(self, kind, option, seq_len, batch=1):
        return FakeTraces(self.spec, self.p, "cuda").trace(kind, option, seq_len, batch) + [Op("host", "view")] * 20


def test_ablate_on_the_paper_profile_adds_replay_beside_the_others(tmp_path, capsys, monkeypatch):
    """The default run (every model, so the learned ones are fitted too: a few seconds) on a slice of the paper
    profile, with a small fake trace in place of the runtime's."""
    from paradyse_lab.app import replay_ablation
    from paradyse_lab.cli import main
    from paradyse_lab.costmodel.profiles import PAPER_PROFILE

    monkeypatch.setattr(replay_ablation, "SublayerTraces", FakeLayerTraces)
    df = pd.read_csv(PAPER_PROFILE)
    part = df[df["model"].isin(["bert", "gpt"]) & df["strategy"].isin(["megatron_ts", "ulysses_z"])
              & (df["seq_len"] <= 65536)]
    part.iloc[::8].to_csv(tmp_path / "paper.csv", index=False)
    assert main(["costmodel", "ablate", "--profiles", str(tmp_path / "paper.csv"), "--cluster", "a100-80gb-x8",
                 "--no-regret", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"analytic", "calibrated", "replay"} <= set(out["models"])
    replay = out["models"]["replay"]
    assert 0 < replay["time_mape_interp"] and 0 < replay["time_mape_leave_one_shape_out"]
    assert set(out["leave_one_shape_out"]["replay"]["by_strategy"]) == {"megatron_ts", "ulysses_z"}
    info = out["replay"]
    assert "spec-derived, not measured" in info["tables"] and info["dispatch_s"] > 0
    assert set(info["loso_call_costs"]) == {"1024/16/16/24/8", "12288/96/96/8/8"}
