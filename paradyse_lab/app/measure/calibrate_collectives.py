"""The collectives stage of `paradyse-lab calibrate`, and the timing of calls made on every rank at once (which
the kernels stage's synchronisation and overlap measurements use too).

A timed call starts together on every rank (a barrier first) and is synchronised with the device on both ends;
a point's time is the slowest rank's. The collectives are the runtime's (point-to-point ones included), at
nccl-tests' buffer sizes S (`calibrate`'s module docstring says which kinds, sizes and repeats, and where the
rows go).
"""

from __future__ import annotations

import statistics
import time

from paradyse_lab.app.measure.calibrate_options import Budget, CalibrateOptions
from paradyse_lab.cluster.spec import COLLECTIVES
from paradyse_lab.costmodel.formulas import sharded_params
from paradyse_lab.runtime.launch.ranks import agree_flag

COLLECTIVE_SIZES = tuple(4096 * 4**i for i in range(7)) + (32 * 2**20,)
"""Buffer bytes per collective call (nccl-tests' S): 4 KiB, 16 KiB, ... 16 MiB, 32 MiB."""


def sync_device(device) -> None:
    """Wait for the device's queued work (CUDA; nothing to wait for on CPU)."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def time_call(fn, device, group, barrier: bool = True) -> float:
    """Seconds of one call of `fn` on this rank, started together on every rank."""
    import torch.distributed as dist  # lazy: torch takes seconds to load; only this path runs it

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import collectives as comm

    if barrier and comm.size(group) > 1:
        dist.barrier(group=group)
    sync_device(device)
    t0 = time.perf_counter()
    fn()
    sync_device(device)
    return time.perf_counter() - t0


def slowest_over_ranks(values: list[float], device, group) -> list[float]:
    """Element-wise max over ranks."""
    import torch  # lazy: torch takes seconds to load; only this path runs it
    import torch.distributed as dist  # lazy: torch takes seconds to load; only this path runs it

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import collectives as comm

    if comm.size(group) == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return [float(v) for v in t.cpu()]


def collective_fn(op: str, nbytes: int, device, dtype, group):
    """A call of the runtime's collective or exchange `op` on a buffer of `nbytes` (nccl-tests' S) at
    this
    group's size."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import collectives as comm

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import p2p as comm_p2p

    p = comm.size(group)
    elem = torch.empty((), dtype=dtype).element_size()
    n = max(p, nbytes // elem // p * p)  # elements of S, a multiple of p
    if op == "all_gather":
        x = torch.ones(n // p, device=device, dtype=dtype)  # [S/p] -> [S]
        return lambda: comm.all_gather(x, group)
    if op == "reduce_scatter":
        x = torch.ones(n, device=device, dtype=dtype)  # [S] -> [S/p]
        return lambda: comm.reduce_scatter(x, group)
    if op == "all_to_all":
        x = torch.ones(n, device=device, dtype=dtype)  # [p * S/p] -> [p * S/p]
        return lambda: comm.all_to_all(x, group)
    if op == "all_reduce":
        x = torch.ones(n, device=device, dtype=dtype)  # [S] summed in place
        return lambda: comm.all_reduce(x, group)
    if op == "p2p":
        x = torch.ones(n, device=device, dtype=dtype)  # [S] to the next rank, [S] from the previous
        return lambda: comm_p2p.ring_exchange(x, group).wait()
    if op == "broadcast":
        x = torch.ones(n, device=device, dtype=dtype)

        def call():
            _, send = comm_p2p.chain_broadcast(x if comm.rank(group) == 0 else None, x, 0, group)
            if send is not None:
                send.wait()
        return call
    raise ValueError(op)


def collective_sizes(spec, max_len: int, p: int) -> list[int]:
    """COLLECTIVE_SIZES up to the first one at least twice the largest buffer a strategy passes to one call
    (a sub-layer's gathered weights, or the [s, h] activations at max_len), whichever is larger."""
    e = 2 if spec.dtype != "fp32" else 4
    largest = max(sharded_params(spec, "mlp"), sharded_params(spec, "attention"), max_len * spec.hidden) * e
    out = []
    for size in COLLECTIVE_SIZES:
        out.append(size)
        if size >= 2 * largest:
            break
    return out


INTER_NODE_OPS = ("all_gather", "reduce_scatter", "all_reduce", "p2p")
"""The kinds measured over the rails across nodes (their network line: formulas.inter_node_time_s)."""


def measure_collectives(opts: CalibrateOptions, spec, budget: Budget, device, dtype, group, bar,
                        ops: tuple[str, ...] = ()) -> list[dict]:
    """Rows (op, ranks, buffer_bytes, median_s, repeats) of every collective kind (or `ops`) and size that fit,
    over `group` (across nodes: one node's ranks, or a rail)."""
    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import collectives as comm

    p = comm.size(group)
    rows = []
    if p == 1:
        return rows
    sizes = collective_sizes(spec, opts.max_len, p)
    for op in ops or COLLECTIVES:
        last = 0.0
        for i, nbytes in enumerate(sizes):
            growth = nbytes / sizes[i - 1] if i else 1.0
            # the two smallest sizes always (alpha and beta need two points); then while the budget lasts
            go = i < 2 or budget.fits("collectives", (opts.repeats + 1) * last * growth)
            if not agree_flag(go, group):
                break
            fn = collective_fn(op, nbytes, device, dtype, group)
            fn()  # untimed: first-call setup
            times = [time_call(fn, device, group) for _ in range(max(5, opts.repeats))]
            med = slowest_over_ranks([statistics.median(times)], device, group)[0]
            last = med
            rows.append({"op": op, "ranks": p, "buffer_bytes": nbytes, "median_s": med, "repeats": len(times)})
        if bar is not None:
            bar.update(1)
    return rows
