"""The kernels stage of `paradyse-lab calibrate`: GEMMs and the attention kernel at the model's shapes, the
analytic model's step terms (dispatch, bandwidths, overlap, synchronisation, the step epilogue), the runtime's
counted dispatches and bytes, and the device's memory; every rank at once, as in training.
"""

from __future__ import annotations

import os
import statistics

from paradyse_lab.app.measure.calibrate_collectives import slowest_over_ranks, time_call
from paradyse_lab.app.measure.calibrate_options import Budget, CalibrateOptions, profile_options
from paradyse_lab.app.measure.kernel_bench import KERNEL_LABELS, _attention_point, _gemm_fn, gemm_shapes, measure
from paradyse_lab.app.measure.step_counts import counting, epilogue_s, runtime_dispatch_s, step_counts
from paradyse_lab.core.strategies import layout_unit
from paradyse_lab.runtime.launch.ranks import agree_flag


def measure_kernels(opts: CalibrateOptions, spec, lengths, budget: Budget, device, dtype, group, bar):
    """(gemm rows, attention rows) measured on every rank at once; rank 0's values."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.attention import kernels as attention

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import collectives as comm

    p = comm.size(group)
    dname = str(dtype).replace("torch.", "")
    picks = sorted({lengths[0], lengths[len(lengths) // 2], lengths[-1]})
    gemm_rows = []
    timing = {"warmup": 1, "max_repeats": max(opts.repeats, 3), "min_repeats": opts.repeats, "target_s": 0.05}
    rate = 0.0  # FLOP/s of the last GEMM: the next one's predicted time
    for shp in gemm_shapes([spec], picks, p):
        flops = 2.0 * shp["m"] * shp["n"] * shp["k"]
        if not agree_flag(budget.fits("kernels", (timing["min_repeats"] + 2) * flops / rate if rate else 0.0), group):
            break
        fn = _gemm_fn(shp["op"], shp["m"], shp["n"], shp["k"], device, dtype)
        if comm.size(group) > 1:
            torch.distributed.barrier(group=group)
        sec, reps = measure(fn, device, **timing)
        rate = flops / sec
        gemm_rows.append({**shp, "dtype": dname, "median_s": sec, "repeats": reps, "flops": flops})
    if bar is not None:
        bar.update(1)

    kernel = attention.backend(torch.empty(1, device=device, dtype=dtype))  # the kernel the runtime calls
    fwd, bwd = attention._KERNELS[kernel]
    att_rows = []
    heads, d = spec.heads, spec.head_dim
    last = 0.0
    for i, s in enumerate(lengths):
        growth = (s / lengths[i - 1]) ** 2 if i else 1.0
        if not agree_flag(budget.fits("kernels", 2 * (opts.repeats + 1) * last * growth), group):
            break
        last = 0.0
        for causal, n, hh in ((True, s, max(1, heads // p)), (False, max(1, s // p), heads)):
            if comm.size(group) > 1:
                torch.distributed.barrier(group=group)
            row, sec = _attention_point(fwd, bwd, hh, n, d, causal, device, dtype, quick=opts.repeats <= 1)
            flops = 3.5 * 4.0 * n * n * hh * d / (2 if causal else 1)
            att_rows.append({"seq_len": n, "heads": hh, "head_dim": d, "causal": str(causal).lower(),
                             "kernel": KERNEL_LABELS[kernel], "dtype": dname, "fwd_s": row["fwd_s"],
                             "bwd_s": row["bwd_s"], "repeats": row["repeats"], "flops": flops})
            last += sec
    if bar is not None:
        bar.update(1)
    return gemm_rows, att_rows


DISPATCH_CHAIN_BLOCKS = 10
"""Blocks (layer norm, GELU, a view round trip, a scaled residual add) in the dispatch benchmark's chain."""


def dispatch_chain(device, dtype):
    """A function running forward and backward of `DISPATCH_CHAIN_BLOCKS` blocks of a sub-layer's memory-bound
    operators (layer norm, GELU, views, a scaled residual add) on a [4, 16] tensor that requires grad: at this
    size each operator costs its dispatch and autograd bookkeeping, not its arithmetic."""
    import torch  # lazy: torch takes seconds to load; only this path runs it
    import torch.nn.functional as F  # lazy: torch takes seconds to load; only this path runs it

    gen = torch.Generator(device=device).manual_seed(0)
    x, w, b = (torch.randn(n, device=device, dtype=dtype, generator=gen).requires_grad_() for n in ((4, 16), 16, 16))

    def run():
        y = x
        for _ in range(DISPATCH_CHAIN_BLOCKS):
            z = F.gelu(F.layer_norm(y, (16,), w, b))  # [4, 16]
            z = z.view(2, 2, 16).transpose(0, 1).reshape(4, 16)  # [4, 16] -> [2, 2, 16] -> [4, 16]
            y = y + 0.5 * z
        y.sum().backward()
    return run


def measure_dispatch_s(device, dtype) -> float:
    """Seconds per operator dispatch of a training step: the dispatch chain (`dispatch_chain`) timed, over the
    operators `step_counts`'s counter counts in it (the unit of the step counts' launches)."""
    run = dispatch_chain(device, dtype)
    with counting() as tally:
        run()
    sec = measure(run, device, warmup=2, max_repeats=50, min_repeats=10, target_s=0.05)[0]
    return sec / max(tally.launches, 1)


STATE_ELEMENTS = 1 << 24
"""fp32 elements (64 MiB) of the buffer the state bandwidth streams."""


def measure_step_terms(spec, lengths, device, dtype, group) -> dict:
    """The analytic model's step terms on this rank (measured_cluster.py): seconds per operator dispatch (of the
    benchmark chain, and inside the runtime's own step: `step_counts.runtime_dispatch_s`), element-wise
    bandwidth at the model's activation size, the ring's overlap with compute, what a blocking collective
    costs after compute (`measure_sync`) and the step epilogue's seconds (`step_counts.epilogue_s`), every
    rank at once as in training."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import collectives as comm

    launch_s = measure_dispatch_s(device, dtype)
    # element-wise: layer norm, GELU and a residual add over [t, 4h] at the middle length; bytes read + written
    t = max(1, lengths[len(lengths) // 2] // comm.size(group))
    x = torch.randn(t, 4 * spec.hidden, device=device, dtype=dtype)
    y = torch.randn_like(x)
    nbytes = x.numel() * x.element_size()

    def elementwise():
        torch.nn.functional.layer_norm(x, x.shape[-1:])
        torch.nn.functional.gelu(x)
        torch.add(x, y)

    sec = measure(elementwise, device, warmup=1, max_repeats=20, min_repeats=5, target_s=0.1)[0]
    hbm = (2 + 2 + 3) * nbytes / max(sec - 3 * launch_s, 0.5 * sec)
    big = torch.ones(STATE_ELEMENTS, device=device, dtype=torch.float32)  # beyond the caches, like Adam's states
    state_sec = measure(lambda: big.add_(1.0), device, warmup=1, max_repeats=10, min_repeats=3, target_s=0.1)[0]
    cfg, p = spec, comm.size(group)
    runtime_launch_s = runtime_dispatch_s(cfg, p, layout_unit(p), profile_options(False), hbm, device, dtype)
    return {"launch_s": launch_s, "hbm_bytes_per_s": hbm, "state_bytes_per_s": 2 * big.numel() * 4 / state_sec,
            "comm_overlap": measure_overlap(spec, t, device, dtype, group), "runtime_launch_s": runtime_launch_s,
            "collective_sync_s": measure_sync(spec, t, device, dtype, group),
            "epilogue_s": epilogue_s(cfg, p, device=device)}


SYNC_CHAIN_CALLS = 8
"""GEMM-then-collective pairs in the synchronisation benchmark (`measure_sync`)."""


def measure_sync(spec, t: int, device, dtype, group) -> float:
    """Seconds a blocking collective costs beyond its own time when it follows compute on every rank (the ranks
    reach it apart, and wake their communication threads while the cores are busy), as in a training step:
    (a chain of `SYNC_CHAIN_CALLS` x (GEMM of a sub-layer's shape, all-gather of the [t, h] activation) - the
    GEMMs alone - the all-gathers back to back) / `SYNC_CHAIN_CALLS`, median of 3 rounds of the slowest rank's
    times, at least 0 (0 on one rank)."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import collectives as comm

    if comm.size(group) == 1:
        return 0.0
    a = torch.randn(t, spec.hidden, device=device, dtype=dtype)  # [t, h]
    w = torch.randn(spec.hidden, 4 * spec.hidden, device=device, dtype=dtype)  # [h, 4h]

    def gemms():
        for _ in range(SYNC_CHAIN_CALLS):
            a @ w  # [t, h] x [h, 4h]

    def gathers():
        for _ in range(SYNC_CHAIN_CALLS):
            comm.all_gather(a, group)  # [t, h] -> [p t, h]

    def chain():
        for _ in range(SYNC_CHAIN_CALLS):
            a @ w  # [t, h] x [h, 4h]
            comm.all_gather(a, group)  # [t, h] -> [p t, h]

    rounds = []
    for _ in range(3):
        tc, tg, tb = slowest_over_ranks([time_call(f, device, group) for f in (gemms, gathers, chain)], device, group)
        rounds.append(max(0.0, (tb - tc - tg) / SYNC_CHAIN_CALLS))
    return statistics.median(rounds)


def measure_overlap(spec, t: int, device, dtype, group) -> float:
    """Fraction of a ring exchange that hides behind a GEMM running meanwhile: (GEMM + exchange - together)
    / the shorter of the two, median of 3 rounds, the slowest rank's times (1.0 on one rank)."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import collectives as comm

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import p2p as comm_p2p

    if comm.size(group) == 1:
        return 1.0
    a = torch.randn(t, spec.hidden, device=device, dtype=dtype)
    w = torch.randn(spec.hidden, 4 * spec.hidden, device=device, dtype=dtype)
    buf = torch.ones(max(t, 1) * 4 * spec.hidden, device=device, dtype=dtype)  # [t * 4h], one activation

    def gemm():
        for _ in range(4):
            a @ w  # [t, h] x [h, 4h]

    def ring():
        comm_p2p.ring_exchange(buf, group).wait()

    def both():
        pending = comm_p2p.ring_exchange(buf, group)
        gemm()
        pending.wait()

    rounds = []
    for _ in range(3):
        tc, tx, tb = slowest_over_ranks([time_call(f, device, group) for f in (gemm, ring, both)], device, group)
        rounds.append(min(1.0, max(0.0, (tc + tx - tb) / max(min(tc, tx), 1e-9))))
    return statistics.median(rounds)


def counted_steps(spec, p: int, unit: int, lengths, recompute: bool, dtype) -> dict:
    """KEY -> (launches, bytes_fixed, bytes_per_token) of the runtime at p ranks,
    counted on the CPU in fp32: the sub-layers at `unit` and 2 `unit` tokens (their bytes are linear in the
    tokens, so the shortest lengths that split give them at the least cost), the whole model at the two
    shortest profile `lengths`; bytes scaled to `dtype` (16-bit: halved, which overcounts the few fp32
    accumulators' savings)."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    scale = torch.empty((), dtype=dtype).element_size() / 4
    counts = step_counts(spec, p, profile_options(recompute), (unit, 2 * unit),
                         tuple(lengths[:2]))
    return {k: (c.launches, scale * c.bytes_fixed, scale * c.bytes_per_token) for k, c in counts.items()}


def device_memory_bytes(device, ranks: int) -> int:
    """CUDA: the device's memory; CPU: physical memory shared by the ranks."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // ranks)
