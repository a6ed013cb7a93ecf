"""The replay cost model as solvers and the simulator ask a cost model (`CostModel`): each sub-layer's time is
the runtime's own trace of it, priced on the machine's kernel tables on the critical path; memory, the embedding
and head, and what a plan may use are the analytic model's (the replay model prices time only).

Torch-free: the traces come from a trace source (`set_trace_source`), which the application layer installs (it
runs the runtime's code on meta tensors); the simulator and solvers only call `sublayer`, which prices plain
`Op` data. A sub-layer's time is its steady-state share of a stack of identical sub-layers: `sublayer_ops`
operations' worth of the runtime's Python before its trace, and the critical path's increment when the
sub-layer runs a second time (`stack.stack_time`), so the host, device and communication clocks carry across
sub-layers as they do in a layer stack.

A packed step (`segments`) is traced as the dense step of its padded length; every attention call is then the
runtime's varlen call over the step's documents: each rank's block holds each document's share n_i / S of its
queries and keys (every strategy's per-document zig-zag layout), so the call does sum_i (sq n_i / S)(sk n_i / S)
query-key pairs instead of sq sk, priced by the attention table as one call of that work (`with_documents`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from paradyse_lab.cluster.spec import ClusterSpec
from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.costmodel.replay.ops import Op
from paradyse_lab.costmodel.replay.price import Prices, critical_paths
from paradyse_lab.costmodel.replay.tables import HostCosts, KernelTables
from paradyse_lab.costmodel.types import SubLayerCost
from paradyse_lab.errors import UserInputError

NAME = "replay"
PASS = Op("host", "sublayer-python")
"""The runtime's Python per sub-layer outside any operator, one operation's dispatch each."""

_TRACE_SOURCE: list[Callable] = []


def set_trace_source(make: Callable) -> None:
    """Install `make(spec, p, device)`, which returns an object answering `trace(kind, option, seq_len, batch)`
    with the operations one rank issues (the application layer's tracer of the runtime)."""
    _TRACE_SOURCE[:] = [make]


def trace_source_installed() -> bool:
    """Whether a trace source is installed (the replay model can be built)."""
    return bool(_TRACE_SOURCE)


def trace_device(cluster: ClusterSpec) -> str:
    """The device whose attention kernels the trace stands for: 'cpu' for a measured CPU host, else 'cuda'."""
    return "cpu" if cluster.on_cpu else "cuda"


def with_documents(op: Op, seq_len: int, segments: tuple[int, ...]) -> Op:
    """An attention call of the dense step of `seq_len` tokens as the varlen call over `segments` (module
    docstring); other operations unchanged."""
    if op.kind != "attention":
        return op
    pairs = sum((op.sq * n // seq_len) * (op.sk * n // seq_len) for n in segments)
    return dataclasses.replace(op, pairs=max(1, pairs))


class ReplayCostModel:
    """Replay-priced sub-layer times of `model` on `cluster` from `tables` and `host` costs (module docstring)."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, p: int | None, tables: KernelTables,
                 host: HostCosts):
        if not _TRACE_SOURCE:
            raise UserInputError("cost model 'replay' needs the runtime's tracer: run it from the paradyse-lab "
                                 "command or `import paradyse_lab.app` first")
        self.analytic = AnalyticCostModel(model, cluster, p)
        self.model, self.cluster, self.p = model, cluster, self.analytic.p
        self.tables, self.host = tables, host
        measured = tables.host  # a CPU's calibrate measured its host runs every kernel itself: priced serially
        priced = dataclasses.replace(cluster, collective_sync_s=host.collective_s) if host.collective_s else cluster
        self.prices = Prices(tables, priced, host.dispatch_s, serial=bool(measured and measured.serial),
                             floor_s=measured.floor_s if measured else 0.0)
        self.traces = _TRACE_SOURCE[0](model, self.p, trace_device(cluster))
        self.name = NAME
        self.label = f"replay ({tables.source}; {host.source})"
        self._cache: dict = {}

    def __getattr__(self, name):  # memory, checks and the fixed part: the analytic model's
        if name == "analytic":
            raise AttributeError(name)
        return getattr(self.analytic, name)

    def budget_bytes(self, budget: int) -> int:
        return self.analytic.budget_bytes(budget)

    def fixed(self, seq_len: int, batch: int = 1):
        return self.analytic.fixed(seq_len, batch)

    def sublayer(self, kind: str, option: StrategyOption, seq_len: int, batch: int = 1,
                 segments: tuple[int, ...] | None = None) -> SubLayerCost:
        """The analytic model's cost with the time, compute and exposed communication of the priced trace."""
        key = (kind, option, seq_len, batch, segments)
        if key in self._cache:
            return self._cache[key]
        base = self.analytic.sublayer(kind, option, seq_len, batch, segments)  # checks the shapes, and memory
        ops = self.traces.trace(kind, option, seq_len, batch)
        if segments is not None and tuple(segments) != (seq_len,):
            ops = [with_documents(op, seq_len, tuple(segments)) for op in ops]
        ops = [PASS] * self.host.sublayer_ops + list(ops)
        device_s = [self.prices.device_s(op) for op in ops]
        one, two = critical_paths(ops * 2, self.prices, device_s * 2, (len(ops), 2 * len(ops)))
        time_s = two.time_s - one.time_s
        compute_s = min(time_s, max(one.kernel_s, one.host_s))  # the kernels, or the host issuing them
        cost = dataclasses.replace(base, time_s=time_s, compute_s=compute_s, exposed_comm_s=time_s - compute_s)
        self._cache[key] = cost
        return cost
