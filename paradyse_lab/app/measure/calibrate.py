"""`paradyse-lab calibrate`: measure the machine it runs on and write a cluster file and a measured profile.

    paradyse-lab calibrate --out DIR              # defaults suit the machine (CPU: gpt2-cpu, p = 2, 6 min)
    paradyse-lab calibrate --out DIR --nproc 8 --model gpt2 --max-len 1024 --budget-s 540   # a GPU node
    torchrun --standalone --nproc-per-node 8 -m paradyse_lab calibrate --out DIR             # the same

Everything is measured through the project's runtime on p ranks (gloo on CPU, NCCL on GPUs), every rank
working at once as in training; rank 0 writes. Stages, in order, each with a share of `--budget-s`
(a stage stops measuring when its next point would not fit, and says so in DIR/calibrate.json):

1. collectives (10%): every kind the strategies use, through runtime/comm.py (all_gather, reduce_scatter,
   all_reduce, all_to_all, the ring exchange `p2p`, the chain broadcast) over buffer sizes from 4 KiB by
   factors of 4 up to twice the largest buffer a strategy passes at max-len (at most 32 MiB);
   the median of max(5, `--repeats`) timed calls after one untimed, the slowest rank's.
   -> DIR/collectives.csv. Across nodes (torchrun --nnodes N; runtime/nodes.py) these run inside each node, and
   all_gather, reduce_scatter, all_reduce and p2p also over the rails (one rank per node, every rail at once)
   -> DIR/inter_node.csv, fitted to the network's latency and bandwidth (`nodes`, `gpus_per_node`,
   `inter_node_*` in the cluster file).
2. kernels (20%): GEMMs at the model's shapes (app/measure/kernel_bench.py: the forward, input- and
   weight-gradient GEMMs of qkv, proj, fc1, fc2 in each strategy's layout) at three lengths of the grid;
   the runtime's attention kernel, causal at s with heads/p heads and non-causal at s/p with all heads (the
   calls the strategies make); device memory (CUDA: the device's; CPU: physical memory / p); the analytic
   model's step terms (`measure_step_terms`): the seconds of one operator dispatch in training (a forward +
   backward chain of tiny operators that require grad, over the dispatches counted in it), the seconds of
   one dispatch inside the runtime's own step (the model's forward + backward under each strategy at the
   shortest length that splits, less what it moves, over the dispatches counted in it), the
   element-wise bandwidth (layer norm, GELU, add over [t, 4h] at the middle length), the bandwidth over a
   buffer larger than the caches (the optimizer step's: an in-place add over 64 MiB), the fraction of a
   ring exchange that hides behind a GEMM, what a blocking all-gather costs after a GEMM beyond the two
   timed alone, the step epilogue timed (gradient norm, AdamW, finite check: the same work every step),
   and, counted on rank 0, the runtime's dispatches and memory-bound
   bytes per sub-layer and option, embedding / head and step epilogue (gradient norm, AdamW, finite check;
   app/measure/step_counts.py).
   -> DIR/gemm.csv, DIR/attention.csv
   Then DIR/cluster.toml (paradyse_lab/measured_cluster.py: alpha and busbw fitted per collective,
   efficiency curves, `source = "measured: ..."` and a [provenance] table: host, device, software, date).
3. profile (the rest): one training step (forward + backward, no optimizer) of the whole model with each
   strategy, with and without recomputation, on every rank (app/measure/profiler.py, `measured-distributed`),
   over `--lengths` lengths from max-len/16 to max-len (geometric, multiples of 2p); lengths ascending,
   every option at a length before the next length, so a budget cut leaves every curve's short end.
   -> DIR/profile.csv (the schema of paradyse_lab/profiles.py plus compute_s, comm_s, comm_modelled).

Resumable: every file is written atomically as soon as it is complete (the profile after every point); a
rerun with the same settings skips finished stages and profile points (`--force` starts over); other
settings in the same DIR are an error. Then: `paradyse-lab ablate-costmodel --profiles DIR/profile.csv
--cluster DIR/cluster.toml --no-regret`, `paradyse-lab train|simulate --cluster DIR/cluster.toml ...`,
`paradyse-lab validate-run --out DIR`.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import socket
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from paradyse_lab.atomic_write import atomic_open, read_json_object, write_text_atomic
from paradyse_lab.errors import UserInputError

COLLECTIVE_SIZES = tuple(4096 * 4**i for i in range(7)) + (32 * 2**20,)
"""Buffer bytes per collective call (nccl-tests' S): 4 KiB, 16 KiB, ... 16 MiB, 32 MiB."""
STAGE_SHARES = {"collectives": 0.10, "kernels": 0.20, "profile": 0.70}
"""Fraction of --budget-s each stage may use (a stage's leftover goes to the next)."""
SETTINGS_FILE = "calibrate.json"


@dataclass(frozen=True)
class CalibrateOptions:
    """One calibration."""

    out: str
    nproc: int
    model: str
    max_len: int
    budget_s: float
    lengths: int = 9
    """Profile lengths (geometric from max_len/16 to max_len)."""
    repeats: int = 3
    """Timed repeats per point (median)."""
    warmup: int = 0
    """Untimed steps per profile point besides the forward that records kept bytes (which warms up too)."""
    recompute: bool = True
    """Also profile every strategy with recomputation."""
    seed: int = 0
    nodes: int = 1
    """Nodes the ranks are on (torchrun's WORLD_SIZE / LOCAL_WORLD_SIZE; 1 without torchrun)."""

    def settings(self) -> dict:
        """What must match for a rerun to reuse DIR's files."""
        return {k: v for k, v in asdict(self).items() if k not in ("out", "budget_s")}


def machine_defaults() -> dict:
    """Defaults that suit this machine: GPUs -> all of them, gpt2 up to 1024 tokens, 9 minutes; CPU ->
    2 processes, gpt2-cpu up to 1024 tokens, 6 minutes (README "Simulation against execution")."""
    import torch

    from runtime.launch import default_nproc

    if torch.cuda.is_available():
        return {"nproc": default_nproc(), "model": "gpt2", "max_len": 1024, "budget_s": 540.0}
    return {"nproc": default_nproc(), "model": "gpt2-cpu", "max_len": 1024, "budget_s": 360.0}


def length_grid(max_len: int, count: int, unit: int) -> list[int]:
    """`count` lengths from max_len/16 to max_len, geometric, rounded to multiples of `unit`, distinct (9 of
    them put 7 at or below max_len/2: `ablate-costmodel` holds lengths out below half a curve's longest)."""
    lo = max(unit, max_len / 16)
    out = []
    for i in range(count):
        x = lo * (max_len / lo) ** (i / max(count - 1, 1))
        v = max(unit, int(round(x / unit)) * unit)
        if v not in out and v <= max_len:
            out.append(v)
    return out


def profile_options(recompute: bool) -> list[str]:
    """Strategy options the profile measures: every runtime strategy, with and without recomputation."""
    from runtime.model import STRATEGY_MODULES

    names = list(STRATEGY_MODULES)
    return names + ([f"{n}+recompute" for n in names] if recompute else [])


# --- measuring (every rank) ------------------------------------------------------------------------------

class Budget:
    """Deadlines of the stages, on rank 0's clock (decisions are broadcast)."""

    def __init__(self, total_s: float):
        self.start, self.total = time.perf_counter(), total_s

    def deadline(self, stage: str) -> float:
        names = list(STAGE_SHARES)
        share = sum(STAGE_SHARES[k] for k in names[:names.index(stage) + 1])  # stages run in this order
        return self.start + self.total * share

    def fits(self, stage: str, predicted_s: float) -> bool:
        return time.perf_counter() + predicted_s <= self.deadline(stage)


def _sync(device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def _time_call(fn, device, group, barrier: bool = True) -> float:
    """Seconds of one call of `fn` on this rank, started together on every rank."""
    import torch.distributed as dist

    from runtime import comm

    if barrier and comm.size(group) > 1:
        dist.barrier(group=group)
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def _slowest(values: list[float], device, group) -> list[float]:
    """Element-wise max over ranks."""
    import torch
    import torch.distributed as dist

    from runtime import comm

    if comm.size(group) == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return [float(v) for v in t.cpu()]


def collective_fn(op: str, nbytes: int, device, dtype, group):
    """A call of comm.py's `op` on a buffer of `nbytes` (nccl-tests' S) at this group's size."""
    import torch

    from runtime import comm

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
        return lambda: comm.ring_exchange(x, group).wait()
    if op == "broadcast":
        x = torch.ones(n, device=device, dtype=dtype)

        def call():
            _, send = comm.chain_broadcast(x if comm.rank(group) == 0 else None, x, 0, group)
            if send is not None:
                send.wait()
        return call
    raise ValueError(op)


def collective_sizes(spec, max_len: int, p: int) -> list[int]:
    """COLLECTIVE_SIZES up to the first one at least twice the largest buffer a strategy passes to one call
    (a sub-layer's gathered weights, or the [s, h] activations at max_len), whichever is larger."""
    from paradyse_lab.costmodel.formulas import sharded_params

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
    over `group` (across nodes: one node's ranks, or a rail: runtime/nodes.py)."""
    from paradyse_lab.cluster_spec import COLLECTIVES
    from runtime import comm
    from runtime.launch import agree

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
            if not agree(go, group):
                break
            fn = collective_fn(op, nbytes, device, dtype, group)
            fn()  # untimed: first-call setup
            times = [_time_call(fn, device, group) for _ in range(max(5, opts.repeats))]
            med = _slowest([statistics.median(times)], device, group)[0]
            last = med
            rows.append({"op": op, "ranks": p, "buffer_bytes": nbytes, "median_s": med, "repeats": len(times)})
        if bar is not None:
            bar.update(1)
    return rows


def measure_kernels(opts: CalibrateOptions, spec, lengths, budget: Budget, device, dtype, group, bar):
    """(gemm rows, attention rows, element-wise bytes/s) on every rank at once; rank 0's values."""
    import torch

    from paradyse_lab.app.measure.kernel_bench import _attention_point, _gemm_fn, gemm_shapes, measure
    from runtime import attention, comm
    from runtime.launch import agree

    p = comm.size(group)
    dname = str(dtype).replace("torch.", "")
    picks = sorted({lengths[0], lengths[len(lengths) // 2], lengths[-1]})
    gemm_rows = []
    timing = {"warmup": 1, "max_repeats": max(opts.repeats, 3), "min_repeats": opts.repeats, "target_s": 0.05}
    rate = 0.0  # FLOP/s of the last GEMM: the next one's predicted time
    for shp in gemm_shapes([spec], picks, p):
        flops = 2.0 * shp["m"] * shp["n"] * shp["k"]
        if not agree(budget.fits("kernels", (timing["min_repeats"] + 2) * flops / rate if rate else 0.0), group):
            break
        fn = _gemm_fn(shp["op"], shp["m"], shp["n"], shp["k"], device, dtype)
        if comm.size(group) > 1:
            torch.distributed.barrier(group=group)
        sec, reps = measure(fn, device, **timing)
        rate = flops / sec
        gemm_rows.append({**shp, "dtype": dname, "median_s": sec, "repeats": reps, "flops": flops})
    if bar is not None:
        bar.update(1)
    from paradyse_lab.app.measure.kernel_bench import KERNEL_LABELS

    kernel = attention.backend(torch.empty(1, device=device, dtype=dtype))  # the kernel the runtime calls
    fwd, bwd = attention._KERNELS[kernel]
    att_rows = []
    heads, d = spec.heads, spec.head_dim
    last = 0.0
    for i, s in enumerate(lengths):
        growth = (s / lengths[i - 1]) ** 2 if i else 1.0
        if not agree(budget.fits("kernels", 2 * (opts.repeats + 1) * last * growth), group):
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
    import torch
    import torch.nn.functional as F

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
    operators step_counts.py's counter counts in it (the unit of the step counts' launches)."""
    from paradyse_lab.app.measure.kernel_bench import measure
    from paradyse_lab.app.measure.step_counts import counting

    run = dispatch_chain(device, dtype)
    with counting() as tally:
        run()
    sec = measure(run, device, warmup=2, max_repeats=50, min_repeats=10, target_s=0.05)[0]
    return sec / max(tally.launches, 1)


def measure_step_terms(spec, lengths, device, dtype, group) -> dict:
    """The analytic model's step terms on this rank (measured_cluster.py): seconds per operator dispatch (of the
    benchmark chain, and inside the runtime's own step: step_counts.py `runtime_dispatch_s`), element-wise
    bandwidth at the model's activation size, the ring's overlap with compute, what a blocking collective
    costs after compute (`measure_sync`) and the step epilogue's seconds (step_counts.py `epilogue_s`), every
    rank at once as in training."""
    import torch

    from paradyse_lab.app.measure.kernel_bench import measure
    from paradyse_lab.app.measure.step_counts import epilogue_s, runtime_dispatch_s
    from paradyse_lab.strategies import layout_unit
    from runtime import comm
    from runtime.reference import GPTConfig

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
    cfg, p = GPTConfig.from_model_spec(spec), comm.size(group)
    runtime_launch_s = runtime_dispatch_s(cfg, p, layout_unit(p), profile_options(False), hbm, device, dtype)
    return {"launch_s": launch_s, "hbm_bytes_per_s": hbm, "state_bytes_per_s": 2 * big.numel() * 4 / state_sec,
            "comm_overlap": measure_overlap(spec, t, device, dtype, group), "runtime_launch_s": runtime_launch_s,
            "collective_sync_s": measure_sync(spec, t, device, dtype, group),
            "epilogue_s": epilogue_s(cfg, p, device=device)}


STATE_ELEMENTS = 1 << 24
"""fp32 elements (64 MiB) of the buffer the state bandwidth streams."""


SYNC_CHAIN_CALLS = 8
"""GEMM-then-collective pairs in the synchronisation benchmark (`measure_sync`)."""


def measure_sync(spec, t: int, device, dtype, group) -> float:
    """Seconds a blocking collective costs beyond its own time when it follows compute on every rank (the ranks
    reach it apart, and wake their communication threads while the cores are busy), as in a training step:
    (a chain of `SYNC_CHAIN_CALLS` x (GEMM of a sub-layer's shape, all-gather of the [t, h] activation) - the
    GEMMs alone - the all-gathers back to back) / `SYNC_CHAIN_CALLS`, median of 3 rounds of the slowest rank's
    times, at least 0 (0 on one rank)."""
    import torch

    from runtime import comm

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
        tc, tg, tb = _slowest([_time_call(f, device, group) for f in (gemms, gathers, chain)], device, group)
        rounds.append(max(0.0, (tb - tc - tg) / SYNC_CHAIN_CALLS))
    return statistics.median(rounds)


def measure_overlap(spec, t: int, device, dtype, group) -> float:
    """Fraction of a ring exchange that hides behind a GEMM running meanwhile: (GEMM + exchange - together)
    / the shorter of the two, median of 3 rounds, the slowest rank's times (1.0 on one rank)."""
    import torch

    from runtime import comm

    if comm.size(group) == 1:
        return 1.0
    a = torch.randn(t, spec.hidden, device=device, dtype=dtype)
    w = torch.randn(spec.hidden, 4 * spec.hidden, device=device, dtype=dtype)
    buf = torch.ones(max(t, 1) * 4 * spec.hidden, device=device, dtype=dtype)  # [t * 4h], one activation

    def gemm():
        for _ in range(4):
            a @ w  # [t, h] x [h, 4h]

    def ring():
        comm.ring_exchange(buf, group).wait()

    def both():
        pending = comm.ring_exchange(buf, group)
        gemm()
        pending.wait()

    rounds = []
    for _ in range(3):
        tc, tx, tb = _slowest([_time_call(f, device, group) for f in (gemm, ring, both)], device, group)
        rounds.append(min(1.0, max(0.0, (tc + tx - tb) / max(min(tc, tx), 1e-9))))
    return statistics.median(rounds)


def counted_steps(spec, p: int, unit: int, lengths, recompute: bool, dtype) -> dict:
    """KEY -> (launches, bytes_fixed, bytes_per_token) of the runtime at p ranks (app/measure/step_counts.py),
    counted on the CPU in fp32: the sub-layers at `unit` and 2 `unit` tokens (their bytes are linear in the
    tokens, so the shortest lengths that split give them at the least cost), the whole model at the two
    shortest profile `lengths`; bytes scaled to `dtype` (16-bit: halved, which overcounts the few fp32
    accumulators' savings)."""
    import torch

    from paradyse_lab.app.measure.step_counts import step_counts
    from runtime.reference import GPTConfig

    scale = torch.empty((), dtype=dtype).element_size() / 4
    counts = step_counts(GPTConfig.from_model_spec(spec), p, profile_options(recompute), (unit, 2 * unit),
                         tuple(lengths[:2]))
    return {k: (c.launches, scale * c.bytes_fixed, scale * c.bytes_per_token) for k, c in counts.items()}


def device_memory_bytes(device, ranks: int) -> int:
    """CUDA: the device's memory; CPU: physical memory shared by the ranks."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // ranks)


def measure_profile(opts: CalibrateOptions, lengths, budget: Budget, group, bar, done, write) -> list[str]:
    """Profile every (length, option) not in `done`, lengths ascending; at each length the options whose
    predicted time (from the option's previous length, growing as s^1.5) still fits run in one call, then
    `write(rows)`. Returns the skipped points as 'option@length: reason'."""
    import pandas as pd

    from paradyse_lab.app.measure.profiler import ProfileOptions, profile
    from runtime.launch import agree

    rows = list(done.values())
    known: dict = {}
    for r in rows:
        known.setdefault(_opt_name(r), {})[int(r["seq_len"])] = float(r["time_s"])
    skipped, stopped = [], set()
    steps = opts.warmup + opts.repeats + 1
    for s in lengths:
        have = {(_opt_name(r), int(r["seq_len"])) for r in rows}
        todo, planned = [], 0.0
        for name in profile_options(opts.recompute):
            if (name, s) in have:
                continue
            curve = known.get(name, {})
            shorter = [x for x in curve if x < s]
            predicted = steps * curve[max(shorter)] * (s / max(shorter)) ** 1.5 if shorter else 0.0
            if name not in stopped and budget.fits("profile", planned + predicted):
                todo.append(name)
                planned += predicted
            else:
                stopped.add(name)
                skipped.append(f"{name}@{s}: time budget")
        todo = agree(todo, group)  # rank 0's clock decides for every rank
        if todo:  # one model for every option at this length; the file is rewritten after each length
            po = ProfileOptions(model=opts.model, seqs=(s,), strategies=tuple(todo), mode="distributed",
                                warmup=opts.warmup, repeats=opts.repeats, seed=opts.seed)
            for row in profile(po, group, progress=False).to_dict("records"):
                rows.append(row)
                known.setdefault(_opt_name(row), {})[s] = float(row["time_s"])
            write(pd.DataFrame(rows))
        if bar is not None:
            bar.update(len(profile_options(opts.recompute)))
    return skipped


def _opt_name(row) -> str:
    rec = str(row["recompute"]).lower() in ("true", "1")
    return row["strategy"] + ("+recompute" if rec else "")


def provenance(device, opts: CalibrateOptions, p: int) -> dict:
    from paradyse_lab.app.measure.profiler import device_name
    from paradyse_lab.software_versions import software_versions, versions_text

    return {"host": socket.gethostname(), "device": device_name(device),
            "software": versions_text(software_versions(device=device)),
            "platform": platform.platform(), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": f"paradyse-lab calibrate --nproc {p} --model {opts.model} --max-len {opts.max_len} "
                       f"--lengths {opts.lengths} --repeats {opts.repeats}", "name": "cluster"}


def calibrate(opts: CalibrateOptions, group=None, progress: bool = True) -> dict | None:
    """Run every stage on this rank (call on every rank of `group`); rank 0 writes DIR and returns the
    summary (other ranks return None)."""
    import pandas as pd
    import torch

    from paradyse_lab.measured_cluster import Measurements, fit_collectives, measured_cluster_toml
    from paradyse_lab.model_spec import get_model
    from paradyse_lab.strategies import layout_unit
    from runtime import comm
    from runtime.launch import agree
    from runtime.nodes import node_layout

    p, rank = comm.size(group), comm.rank(group)
    nodes = node_layout(group)  # collectives inside one node, and over the rails across nodes
    out = Path(opts.out)
    gpu = torch.cuda.is_available() and (p == 1 or comm.is_nccl(group))  # as runtime/train.py decides
    device = torch.device("cuda", torch.cuda.current_device()) if gpu else torch.device("cpu")
    dtype = torch.bfloat16 if gpu else torch.float32
    spec = get_model(opts.model)
    lengths = length_grid(opts.max_len, opts.lengths, layout_unit(p))
    state = agree(_load_state(out, opts) if rank == 0 else None, group)
    budget = Budget(opts.budget_s)
    bar = None
    n_units = 6 + 2 + len(lengths) * len(profile_options(opts.recompute))
    if progress and rank == 0:
        from tqdm import tqdm

        bar = tqdm(total=n_units, desc="calibrate", file=sys.stderr, dynamic_ncols=True)
    if "collectives" not in state["done"]:
        if bar is not None:
            bar.set_postfix_str("collectives")
        coll = measure_collectives(opts, spec, budget, device, dtype, nodes.node_group or group, bar)
        inter = measure_collectives(opts, spec, budget, device, dtype, nodes.rail_group, None,
                                    INTER_NODE_OPS) if nodes.nodes > 1 else []
        if rank == 0:
            _write_csv(out / "collectives.csv", coll, ("op", "ranks", "buffer_bytes", "median_s", "repeats"))
            if nodes.nodes > 1:
                _write_csv(out / "inter_node.csv", inter, ("op", "ranks", "buffer_bytes", "median_s", "repeats"))
            state = _mark(out, state, "collectives")
    elif bar is not None:
        bar.update(6)
    if "kernels" not in state["done"]:
        if bar is not None:
            bar.set_postfix_str("kernels")
        gemm, att = measure_kernels(opts, spec, lengths, budget, device, dtype, group, bar)
        if not gemm or not att:  # the same on every rank (the budget checks agree); no step terms for no file
            raise UserInputError(f"the time budget (--budget-s {opts.budget_s:g}) ran out before any "
                                 f"{'GEMM' if not gemm else 'attention kernel'} was measured; no cluster file "
                                 "written: rerun with a larger --budget-s")
        terms_start = time.perf_counter()  # the step terms and counts are bounded: not charged to --budget-s
        terms = measure_step_terms(spec, lengths, device, dtype, group)
        if rank == 0:
            _write_csv(out / "gemm.csv", gemm, tuple(gemm[0]) if gemm else ("m",))
            _write_csv(out / "attention.csv", att, tuple(att[0]) if att else ("seq_len",))
            coll = pd.read_csv(out / "collectives.csv") if (out / "collectives.csv").stat().st_size else None
            m = Measurements(ranks=p, gpu_name=_gpu_name(device), memory_bytes=device_memory_bytes(device, p),
                             **terms, counted_model=spec.name,  # the step terms: Measurements' fields by name
                             step_counts=counted_steps(spec, p, layout_unit(p), lengths, opts.recompute, dtype),
                             gemm=[(min(r["m"], r["n"], r["k"]), r["flops"], r["median_s"]) for r in gemm],
                             attention=[(r["seq_len"], r["causal"] == "true", r["flops"], r["fwd_s"] + r["bwd_s"])
                                        for r in att],
                             collectives=_collective_points(coll), provenance=provenance(device, opts, p),
                             nodes=nodes.nodes, inter_node=_collective_points(_read_rows(out / "inter_node.csv")))
            write_text_atomic(out / "cluster.toml", measured_cluster_toml(m))
            state["fits"] = {op: asdict(f) for op, f in fit_collectives(m).items()}
            state = _mark(out, state, "kernels")
        budget.start += time.perf_counter() - terms_start
    elif bar is not None:
        bar.update(2)
    state = agree(state, group)
    if bar is not None:
        bar.set_postfix_str("profile")
    done = {}
    if rank == 0 and (out / "profile.csv").is_file():
        done = {(_opt_name(r), int(r["seq_len"])): r for r in pd.read_csv(out / "profile.csv", dtype=str,
                                                                       keep_default_na=False).to_dict("records")}
    done = agree(done, group)

    def write(df):
        if rank == 0:
            from paradyse_lab.app.measure.profiler import write_rows_atomic

            df = df.copy()
            for c in ("time_s", "compute_s", "comm_s"):
                df[c] = df[c].astype(float)
            write_rows_atomic(df, str(out / "profile.csv"))

    skipped = measure_profile(opts, lengths, budget, group, bar, done, write)
    if bar is not None:
        bar.close()
    if rank != 0:
        return None
    state["skipped"] = skipped
    state["lengths"] = lengths
    state["wall_s"] = state.get("wall_s", 0.0) + time.perf_counter() - budget.start
    state = _mark(out, state, "profile")
    return state


def _gpu_name(device) -> str:
    from paradyse_lab.app.measure.profiler import device_name

    return device_name(device)


def _read_rows(path: Path):
    """A measured CSV as a DataFrame (None when empty or absent)."""
    import pandas as pd

    return pd.read_csv(path) if path.is_file() and path.stat().st_size else None


def _collective_points(df) -> dict:
    if df is None or df.empty:
        return {}
    return {op: list(zip(g["buffer_bytes"].astype(float), g["median_s"].astype(float)))
            for op, g in df.groupby("op")}


def _write_csv(path: Path, rows: list[dict], columns) -> None:
    import csv

    with atomic_open(path) as f:
        writer = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def _load_state(out: Path, opts: CalibrateOptions) -> dict:
    path = out / SETTINGS_FILE
    if path.is_file():
        state = read_json_object(path)
        if state.get("settings") == opts.settings():
            return state
    return {"settings": opts.settings(), "done": []}


def _mark(out: Path, state: dict, stage: str) -> dict:
    state = dict(state, done=sorted(set(state["done"]) | {stage}))
    write_text_atomic(out / SETTINGS_FILE, json.dumps(state, indent=1, default=str) + "\n")
    return state


if __name__ == "__main__":  # the command line lives in paradyse_lab/cli/; refuse instead of doing nothing
    import sys

    print("error: run `paradyse-lab calibrate ...` (or `torchrun --nproc-per-node N -m paradyse_lab calibrate ...`); "
          "this module is a library", file=sys.stderr)
    raise SystemExit(2)
