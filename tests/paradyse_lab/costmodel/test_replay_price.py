"""The replay model's pricing (paradyse_lab/costmodel/replay): the kernel tables reproduce their measured rows,
and the critical path is host-bound, device-bound or communication-bound as the operations make it, with a
double-buffered exchange hidden behind the compute it overlaps and exposed when longer.

Run: `python -m pytest -q tests/paradyse_lab/costmodel/test_replay_price.py` (no torch).
"""

from __future__ import annotations

import csv
import dataclasses

import numpy as np
import pytest

from paradyse_lab.cluster.presets import PRESETS
from paradyse_lab.costmodel.replay.ops import Op
from paradyse_lab.costmodel.replay.price import Prices, critical_path, critical_paths
from paradyse_lab.costmodel.replay.stack import DispatchGrid, fit_dispatch, stack_time
from paradyse_lab.costmodel.replay.tables import BUNDLED, bundled_tables

CLUSTER = PRESETS["h100-80gb-x8"]
TABLES = bundled_tables("h100-80gb-x8")


def _prices(dispatch_s: float = 0.0) -> Prices:
    return Prices(TABLES, CLUSTER, dispatch_s)


def test_presets_without_tables_have_none():
    assert bundled_tables("a100-40gb-x8") is None and bundled_tables("h200-x8") is None
    assert TABLES is not None and not TABLES.derived


def test_gemm_table_reproduces_its_rows():
    with open(BUNDLED / "h100-80gb-x8" / "gemm.csv") as f:
        rows = list(csv.DictReader(f))
    same: dict = {}
    for r in rows:  # a shape several layouts share was measured once for each
        same.setdefault((r["dtype"], int(r["m"]), int(r["n"]), int(r["k"])), []).append(float(r["median_s"]))
    for (dtype, m, n, k), times in same.items():
        got = TABLES.gemm.seconds(Op("gemm", "mm", dtype, m=m, n=n, k=k))
        assert min(times) * (1 - 1e-3) <= got <= max(times) * (1 + 1e-3), (m, n, k, got, times)


def test_attention_table_reproduces_its_rows_and_grows_between_them():
    with open(BUNDLED / "h100-80gb-x8" / "attention.csv") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        s, h, d = int(r["seq_len"]), int(r["heads"]), int(r["head_dim"])
        if d != 64:  # head dimension 128 has two shapes' rows (llama's 8 heads, gpt's 12) on one curve
            continue
        for which, col in (("forward", "fwd_s"), ("backward", "bwd_s")):
            op = Op("attention", "attention", batch=1, sq=s, sk=s, heads=h, kv_heads=h, head_dim=d,
                    causal=r["causal"] == "true", which=which)
            assert TABLES.attention.seconds(op) == pytest.approx(float(r[col]), rel=1e-6)
    big = [TABLES.attention.seconds(Op("attention", "a", sq=s, sk=s, heads=8, kv_heads=8, head_dim=128,
                                       which="forward")) for s in (20000, 40000, 80000)]
    assert big[0] < big[1] < big[2]


def _kernel(t_bytes: int) -> Op:
    return Op("elementwise", "add", "bfloat16", nbytes=t_bytes)


def test_host_bound_and_device_bound():
    ops = [_kernel(1000)] * 100  # tiny kernels: the host's dispatch decides
    assert critical_path(ops, _prices(10e-6)).time_s == pytest.approx(100 * 10e-6 + 2e-6)
    big = [_kernel(int(3.35e9))] * 10  # 1 ms each at 3.35 TB/s: the device decides
    assert critical_path(big, _prices(10e-6)).time_s == pytest.approx(10e-6 + 10 * 1e-3)


def test_exchange_overlaps_the_compute_it_is_double_buffered_with():
    compute = _kernel(int(3.35e9))  # 1 ms
    small = Op("p2p", "exchange", nbytes=1000, group=8, ref=1)
    big = Op("p2p", "exchange", nbytes=int(5e9), group=8, ref=1)
    wait = Op("wait", "wait", ref=1)
    alone = critical_path([compute, compute], _prices()).time_s
    assert critical_path([small, compute, wait, compute], _prices()).time_s == pytest.approx(alone)
    exposed = critical_path([big, compute, wait, compute], _prices())
    assert exposed.time_s == pytest.approx(exposed.comm_s + 1e-3)  # the block waits for the exchange
    local = critical_path([big, compute, wait, compute], dataclasses.replace(_prices(), comm="local-copy"))
    assert local.comm_s == 0 and local.kernel_s > alone  # a rank-local run copies on the device stream


def test_one_walk_gives_every_prefix_exactly_as_its_own_walk():
    """`critical_paths` (one walk, what a stack of layers prices one layer and two with) equals `critical_path` of
    each prefix to the bit, for every kind of operation, on overlapping, local-copy and serial clocks."""
    layer = [_kernel(int(3.35e8)), Op("p2p", "exchange", nbytes=int(5e8), group=8, ref=1), _kernel(1000),
             Op("collective", "all_reduce", nbytes=10**6, group=8), Op("wait", "wait", ref=1),
             Op("host", "view"), Op("host", "_local_scalar_dense"), _kernel(int(3.35e7))]
    ops = layer * 3
    for prices in (_prices(5e-6), dataclasses.replace(_prices(5e-6), comm="local-copy"),
                   dataclasses.replace(_prices(2e-5), serial=True, floor_s=4e-6)):
        ends = (len(layer), 2 * len(layer), len(ops))
        assert critical_paths(ops, prices, None, ends) == [critical_path(ops[:n], prices) for n in ends]


def test_the_dispatch_grid_is_stack_time_at_each_grid_point_to_the_bit():
    """`DispatchGrid.add` (each operation classified and priced once for every grid point) equals `stack_time` at
    each grid dispatch cost exactly, for every kind of operation, on overlapping, local-copy and serial clocks."""
    from paradyse_lab.costmodel.replay.stack import GRID

    layer = [_kernel(int(3.35e8)), Op("p2p", "exchange", nbytes=int(5e8), group=8, ref=1), _kernel(1000),
             Op("collective", "all_reduce", nbytes=10**6, group=8), Op("wait", "wait", ref=1),
             Op("host", "view"), Op("host", "_local_scalar_dense"), _kernel(int(3.35e7))]
    for prices in (_prices(), dataclasses.replace(_prices(), comm="local-copy"),
                   dataclasses.replace(_prices(), serial=True, floor_s=4e-6)):
        grid = DispatchGrid(prices)
        for layers in (1, 3):
            grid.add(layer, layers)
            want = [stack_time(layer, layers, dataclasses.replace(prices, dispatch_s=d)) for d in GRID]
            assert grid.rows[-1].tolist() == want


def test_stack_of_layers_and_the_fitted_dispatch_cost():
    layer = [_kernel(1000)] * 50 + [_kernel(int(3.35e8))]  # 50 launches, then 0.1 ms
    prices = _prices(5e-6)
    assert stack_time(layer, 4, prices) == pytest.approx(4 * 51 * 5e-6 + 1e-4, rel=1e-6)
    grid = DispatchGrid(_prices())
    for layers in (1, 2, 8):
        grid.add(layer, layers)
    truth = np.array([stack_time(layer, n, _prices(7e-6)) for n in (1, 2, 8)])
    assert fit_dispatch(grid, truth) == pytest.approx(7e-6, rel=0.02)


def test_a_gemm_in_a_dtype_the_table_lacks_is_refused_not_priced_as_another():
    """The bundled H100 table holds bf16 GEMMs only: an fp32 GEMM priced at bf16's throughput would come out
    several times too fast, so it is refused with one line naming both dtypes."""
    from paradyse_lab.errors import UserInputError

    with pytest.raises(UserInputError, match="holds bfloat16; the model's GEMMs run in float32"):
        TABLES.gemm.seconds(Op("gemm", "mm", "float32", m=1024, n=1024, k=1024))


# --- measured element-wise and host costs (a calibrated folder's elementwise.csv and dispatch.csv) ---------------


def _measured_tables(tmp_path, serial: bool):
    from paradyse_lab.costmodel.replay.tables import KernelTables

    for name in ("gemm.csv", "attention.csv"):
        (tmp_path / name).write_text((BUNDLED / "h100-80gb-x8" / name).read_text())
    (tmp_path / "elementwise.csv").write_text("op,nbytes,median_s\nadd,1000,1e-5\nadd,1000000,1e-4\n")
    (tmp_path / "dispatch.csv").write_text(f"device,serial,dispatch_s,floor_s\ncpu,{str(serial).lower()},2e-5,4e-6\n")
    return KernelTables.read(tmp_path)


def test_measured_elementwise_curve_prices_by_size(tmp_path):
    ew = _measured_tables(tmp_path, True).elementwise
    assert ew.seconds(10) == pytest.approx(1e-5)  # below the smallest: its fixed cost
    assert ew.seconds(1000) == pytest.approx(1e-5) and ew.seconds(1000000) == pytest.approx(1e-4)
    assert ew.seconds(31623) == pytest.approx(10 ** -4.5, rel=1e-3)  # log-log between the rows
    assert ew.seconds(10 ** 7) == pytest.approx(1e-3)  # above the largest: its bandwidth


def test_serial_host_waits_for_every_kernel_and_pays_the_dispatch_once(tmp_path):
    """A CPU's host runs each kernel itself: the step is every dispatch plus every kernel beyond the bare call's
    floor (which the dispatch holds), where the overlapping clocks would give the larger of the two sums."""
    from paradyse_lab.costmodel.replay.price import measured_prices

    ops = [Op("elementwise", "add", nbytes=1000000), Op("host", "view"), Op("elementwise", "add", nbytes=1000)] * 3
    serial = measured_prices(_measured_tables(tmp_path, True), CLUSTER)
    assert (serial.dispatch_s, serial.floor_s, serial.serial) == (2e-5, 4e-6, True)
    assert critical_path(ops, serial).time_s == pytest.approx(9 * 2e-5 + 3 * (1e-4 - 4e-6) + 3 * (1e-5 - 4e-6))
    overlapped = measured_prices(_measured_tables(tmp_path, False), CLUSTER)
    assert critical_path(ops, overlapped).time_s == pytest.approx(2e-5 + 3 * (1e-4 + 1e-5))  # device-bound
    with pytest.raises(ValueError, match="no measured dispatch cost"):
        measured_prices(TABLES, CLUSTER)
