"""Price a traced step: each operation from the machine's tables, the step the critical path over three clocks.

Operation prices (`Prices.device_s`): GEMMs and attention calls from `KernelTables`; element-wise work from the
tables' measured element-wise curve when they have one, else (and a collective's fake local copy, if any) at
`hbm_bytes_per_s`, at least `min_kernel_s`; host copies over the
host link; collectives and point-to-point exchanges by the cluster's alpha-beta model at their group size
(`formulas.collective_call_s`); views and allocations nothing on the device. Every operation costs the host
`dispatch_s` to issue (the Python and dispatcher work between kernels: what makes short steps dispatch-bound).

The critical path (`critical_path`), as the runtime overlaps:
- the host issues operations one after another (`dispatch_s` each); a kernel starts when the host has issued
  it and the device stream is free; a collective runs on the device stream (the rank waits for its peers);
- a point-to-point exchange runs on its own communication stream, from when it is issued (after the compute
  that produced its send buffer) and the previous exchange is done; its `wait` holds the device stream until
  it has arrived: the ring's and METP's double-buffered blocks overlap compute this way, and an exchange
  longer than the block it hides behind shows as exposed time;
- in 'local-copy' mode (a rank-local measurement's fake group) every collective and exchange is one copy kernel
  on the device stream, and a wait waits for nothing;
- a host read of a device value (`_local_scalar_dense`) makes the host wait for the device;
- `serial` (a CPU, whose host runs every kernel itself): the host waits for every kernel and collective, so an
  operation costs its dispatch plus its device seconds beyond `floor_s` (the bare call's fixed cost, which the
  measured dispatch cost already holds); only the point-to-point exchanges still overlap (gloo's threads).
The step takes max(host, device) at the end. `measured_prices` takes the dispatch cost, the floor and
seriality from the tables' measured host costs.
"""

from __future__ import annotations

from dataclasses import dataclass

from paradyse_lab.cluster.spec import ClusterSpec
from paradyse_lab.costmodel import formulas as F
from paradyse_lab.costmodel.replay.ops import Op
from paradyse_lab.costmodel.replay.tables import KernelTables

DEVICE_KINDS = ("gemm", "attention", "elementwise", "host_copy")


@dataclass(frozen=True)
class Prices:
    """What one machine charges: its tables, the cluster's bandwidths and alpha-beta, and the per-operation costs."""

    tables: KernelTables
    cluster: ClusterSpec
    dispatch_s: float
    """Host seconds per operation issued."""
    min_kernel_s: float = 2e-6
    """Shortest element-wise kernel (launch and tail)."""
    comm: str = "alpha-beta"
    """'alpha-beta': collectives and exchanges as a real group runs them; 'local-copy': as a fake group runs them
    in a rank-local measurement (one local copy kernel on the device stream each, nothing sent)."""
    serial: bool = False
    """The host runs every kernel itself (module docstring)."""
    floor_s: float = 0.0
    """serial: seconds of a bare call already inside `dispatch_s`."""

    def device_s(self, op: Op) -> float:
        """Seconds of one operation on the device (or the link), excluding its dispatch."""
        if op.kind == "gemm":
            return self.tables.gemm.seconds(op)
        if op.kind == "attention":
            return self.tables.attention.seconds(op)
        if op.kind == "elementwise":
            if self.tables.elementwise is not None:
                return self.tables.elementwise.seconds(op.nbytes)
            return max(self.min_kernel_s, op.nbytes / self.cluster.hbm_bytes_per_s)
        if op.kind == "host_copy":
            link = self.cluster.host_link_bytes_per_s or self.cluster.hbm_bytes_per_s
            return max(self.min_kernel_s, op.nbytes / link)
        if op.kind in ("collective", "p2p") and self.comm == "local-copy":
            return max(self.min_kernel_s, 2 * op.nbytes / self.cluster.hbm_bytes_per_s) if op.nbytes else 0.0
        if op.kind == "collective":
            return F.collective_call_s(self.cluster, op.name, op.nbytes, op.group)
        if op.kind == "p2p":
            return F.collective_call_s(self.cluster, "p2p", op.nbytes, op.group) if op.nbytes else 0.0
        return 0.0


@dataclass(frozen=True)
class StepTime:
    """A priced trace: the critical path and its parts."""

    time_s: float
    host_s: float
    """Seconds the host spends issuing."""
    kernel_s: float
    """Sum of the kernels' device seconds (GEMMs, attention, element-wise, host copies)."""
    comm_s: float
    """Sum of the collectives' and exchanges' seconds."""


def critical_path(ops, prices: Prices, device_s=None) -> StepTime:
    """The step time of `ops` (module docstring); `device_s` (one per op) may be given precomputed."""
    return critical_paths(ops, prices, device_s, (len(ops),))[0]


def critical_paths(ops, prices: Prices, device_s=None, ends=()) -> list[StepTime]:
    """`critical_path` of each prefix `ops[:end]` for the increasing `ends`, in one walk over `ops`: a layer stack
    prices one layer and two (`stack.stack_time`), the first the prefix of the second."""
    return walk(clock_steps(ops, prices, device_s), prices.dispatch_s, prices.serial, ends)


KERNEL, COLLECTIVE, EXCHANGE, WAIT, HOST_READ, HOST = range(6)
"""What an operation does to the clocks (`clock_steps`): a kernel on the device stream (a local-copy exchange
too), a collective on the device stream, an exchange on the communication stream, a wait for an exchange, a host
read of a device value, host work only."""


def clock_steps(ops, prices: Prices, device_s=None) -> list[tuple]:
    """(what it does to the clocks, device seconds, seconds it holds the device stream, exchange ref) of each of
    `ops`: everything of the critical path that does not depend on the dispatch cost, so that the walk at several
    dispatch costs (`stack.DispatchGrid`) classifies and prices each operation once."""
    if device_s is None:
        device_s = [prices.device_s(op) for op in ops]
    serial, floor, local = prices.serial, prices.floor_s, prices.comm == "local-copy"
    steps = []
    for op, t in zip(ops, device_s):
        kind = op.kind
        if kind in DEVICE_KINDS or (kind == "p2p" and local):
            what = KERNEL
        elif kind == "collective":
            what = COLLECTIVE
        elif kind == "p2p":
            what = EXCHANGE
        elif kind == "wait":
            what = WAIT
        elif op.name.startswith("_local_scalar"):
            what = HOST_READ
        else:
            what = HOST
        run = max(0.0, t - floor) if serial else t  # serial: the bare call's cost is inside the dispatch
        steps.append((what, t, run, op.ref))
    return steps


def walk(steps: list[tuple], d: float, serial: bool, ends) -> list[StepTime]:
    """The critical path of each prefix `steps[:end]` (`clock_steps`) at dispatch cost `d`, in one walk."""
    host = dev = comm_free = 0.0
    kernel_s = comm_s = 0.0
    arrive: dict[int, float] = {}
    out = []
    start = 0
    for end in ends:
        for what, t, run, ref in steps[start:end]:
            host += d
            if what == KERNEL:
                dev = max(dev, host) + run
                kernel_s += t
            elif what == COLLECTIVE:
                dev = max(dev, host) + run
                comm_s += t
            elif what == EXCHANGE:
                start_s = max(comm_free, dev, host)
                comm_free = arrive[ref] = start_s + t
                comm_s += t
            elif what == WAIT:
                dev = max(dev, arrive.get(ref, 0.0))
            elif what == HOST_READ:
                host = max(host, dev)
            if serial:
                host = max(host, dev)
        out.append(StepTime(max(host, dev), end * d, kernel_s, comm_s))
        start = end
    return out


def measured_prices(tables: KernelTables, cluster: ClusterSpec, comm: str = "alpha-beta") -> Prices:
    """Prices with the tables' measured per-operation host costs (dispatch cost, bare-call floor, seriality);
    tables without them (the bundled H100 ones) have no measured dispatch cost: fit one (stack.fit_dispatch)."""
    if tables.host is None:
        raise ValueError(f"{tables.source}: no measured dispatch cost (dispatch.csv); fit one on measured steps")
    h = tables.host
    return Prices(tables, cluster, h.dispatch_s, comm=comm, serial=h.serial, floor_s=h.floor_s)
