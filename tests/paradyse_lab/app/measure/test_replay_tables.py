"""The replay model's tables measured on this CPU (paradyse_lab/app/measure/replay_tables.py): they hold every GEMM
and attention call the runtime's trace issues, `KernelTables.read` accepts them and they price a traced step
(with the measured dispatch cost, serially as a CPU runs), a budget cut leaves points for a rerun that measures
only those. Tiny: bert's layer at h 128, p = 2, one strategy, each timing at its fewest repeats.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from paradyse_lab.app.measure import kernel_bench
from paradyse_lab.app.measure.replay_tables import (
    DISPATCH_COLUMNS,
    ELEMENTWISE_COLUMNS,
    TABLE_GEMM_COLUMNS,
    Measurer,
    coarse_to_fine,
    measure_tables,
    read_rows,
)
from paradyse_lab.app.replay_traces import SublayerTraces
from paradyse_lab.cluster.presets import PRESETS
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.replay.price import critical_path, measured_prices
from paradyse_lab.costmodel.replay.tables import HOST_FILE, KernelTables, host_costs

SPEC = dataclasses.replace(get_model("bert-tiny"), dtype="fp32")
LENGTHS = [64, 128]
STRATEGIES = ["megatron_cz"]  # attention causal at s and non-causal ring blocks: both kinds of row


@pytest.fixture(scope="module")
def _traces(tmp_path_factory):
    return tmp_path_factory.mktemp("traces")  # one trace of the layer for every test here


@pytest.fixture(autouse=True)
def _quick(monkeypatch, _traces):
    monkeypatch.setattr(kernel_bench, "TARGET_SCALE", 0.0)  # what is written is the subject, not its precision
    monkeypatch.setenv("PARADYSE_TRACE_CACHE", str(_traces))


def _measurer(fits=lambda s: True) -> Measurer:
    return Measurer(torch.device("cpu"), torch.float32, fits, repeats=1)


def test_coarse_to_fine_visits_the_ends_then_the_midpoints():
    assert coarse_to_fine([1, 2, 3, 4, 5, 6, 7, 8, 9]) == [1, 9, 5, 3, 7, 2, 4, 6, 8]
    assert coarse_to_fine([1, 2]) == [1, 2]


def test_measured_tables_hold_every_traced_call_and_price_a_traced_step(tmp_path):
    got = measure_tables(SPEC, 2, LENGTHS, STRATEGIES, _measurer(), tmp_path / "kernels")
    assert got["written"] == ["gemm.csv", "attention.csv", "elementwise.csv", "dispatch.csv", HOST_FILE]
    assert not got["skipped"]
    for name, columns in (("gemm.csv", TABLE_GEMM_COLUMNS), ("elementwise.csv", ELEMENTWISE_COLUMNS),
                          ("dispatch.csv", DISPATCH_COLUMNS)):
        assert tuple(read_rows(tmp_path / "kernels" / name)[0]) == columns
    tables = KernelTables.read(tmp_path / "kernels")
    prices = measured_prices(tables, PRESETS["h100-80gb-x8"])
    assert prices.serial and prices.dispatch_s > prices.floor_s > 0
    host = host_costs(PRESETS["h100-80gb-x8"], tmp_path / "kernels")  # what the replay cost model charges
    assert host.dispatch_s == pytest.approx(prices.dispatch_s, rel=1e-5) and host.sublayer_ops == 0
    gemms = {(int(r["m"]), int(r["n"]), int(r["k"])) for r in read_rows(tmp_path / "kernels" / "gemm.csv")}
    att = {(int(r["seq_len"]), int(r["heads"]), r["causal"]) for r in read_rows(tmp_path / "kernels" / "attention.csv")}
    traces = SublayerTraces(SPEC, 2, "cpu")
    for s in LENGTHS:
        ops = [op for kind in ("attention", "mlp") for op in traces.trace(kind, StrategyOption(STRATEGIES[0]), s)]
        assert {(o.m, o.n, o.k) for o in ops if o.kind == "gemm"} <= gemms
        assert {(o.sq, o.heads, str(o.causal).lower()) for o in ops if o.kind == "attention" and o.sq == o.sk} <= att
        step = critical_path(ops, prices)
        # serial: every dispatch plus each kernel beyond the bare call's cost, so more than either alone
        assert step.time_s > step.host_s == pytest.approx(len(ops) * prices.dispatch_s)
        assert step.time_s > step.kernel_s > 0


def test_a_cut_budget_leaves_points_that_a_rerun_measures_alone(tmp_path):
    calls = []

    def fits(predicted_s):  # the trace and the first three GEMMs fit, nothing after
        calls.append(predicted_s)
        return len(calls) <= 4

    first = measure_tables(SPEC, 2, LENGTHS, STRATEGIES, _measurer(fits), tmp_path)
    assert first["rows"]["gemm"] == 3 and first["rows"]["attention"] == 0 and first["skipped"]
    assert "attention.csv" not in first["written"]  # no file without a row
    measured = []
    again = _measurer()
    real = again.gemms
    again.gemms = lambda spec, shapes, done: (measured.append(len(shapes.gemms) - len(done)) or real(spec, shapes,
                                                                                                     done))
    second = measure_tables(SPEC, 2, LENGTHS, STRATEGIES, again, tmp_path)
    assert not second["skipped"] and measured == [second["rows"]["gemm"] - 3]
    keys = [(r["m"], r["n"], r["k"]) for r in read_rows(tmp_path / "gemm.csv")]
    assert len(keys) == len(set(keys)) == second["rows"]["gemm"]
    assert read_rows(tmp_path / "dispatch.csv") and len(read_rows(tmp_path / "elementwise.csv")) == 8
