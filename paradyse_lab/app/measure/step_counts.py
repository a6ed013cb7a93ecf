"""What one training step of the runtime dispatches besides its GEMMs, attention kernels and collectives:
operator launches and the bytes the memory-bound operators move.

Library module of `paradyse-lab calibrate`, which writes the counts into the
measured cluster file (`[step_counts]`) for the analytic model to price:
launches x the measured launch cost, bytes / the measured memory bandwidth. These are
counts of what the runtime does, taken with `TorchDispatchMode` on one process playing rank 0 of a p-rank
world, not fits to times.

- Counted: every aten operator dispatched in forward + backward of one sub-layer (per strategy option and
  kind), of the rest of the model (embedding, final norm, head, loss: `fixed`) and of the AdamW step that
  the training step times (`optimizer`).
- Not counted, because other measurements price them: the matrix products' bytes (`GEMM_OPS`, the GEMM
  efficiency curve), the attention kernel calls (`_run`, `_run_masked`: the attention
  efficiency
  curves) and everything inside the runtime's collectives and point-to-point exchanges (the
  alpha-beta fits).
- Launches: every operator dispatched outside the attention kernels and collectives, views, allocations and
  the GEMM calls included: on a CPU each costs the dispatcher's and autograd's bookkeeping whatever it moves
  (`calibrate` prices one with the dispatch benchmark of `calibrate_kernels.measure_step_terms`, counted by
  this same counter). The matrix products' arithmetic is priced by the GEMM curve, their dispatch here.
- Bytes of an operator: its tensor inputs plus its tensor outputs (read once, written once); a view moves
  nothing (`OpOverload.is_view`), an allocation (`empty*`) moves nothing, a GEMM's traffic is in its measured
  rate.
- Bytes grow linearly with the tokens (norms, residuals, activations) and with the weights (ZeRO-3 and METP
  layout copies), so two lengths give `bytes = fixed + per_token x tokens` exactly; launches do not depend on
  the length.
- The price of a launch inside the runtime's own step (`runtime_dispatch_s`) is more than a launch of the
  benchmark chain's: each sub-layer's Python (its context, the strategy's dispatch, `SubLayerFunction`'s
  save and unflatten, the gradient flattening) runs between its operators. `calibrate` times the model's
  forward + backward at the shortest length that splits, where arithmetic is negligible, over the
  launches counted in it (`launch_us` prices the optimizer's, a plain loop of operators).
- The optimizer count is what the training step runs after the backward of a step (`step_epilogue`): the
  global gradient norm (a squared copy and a sum per gradient), the AdamW step and zero_grad, and the
  finite-weights check (an isfinite and an all() per parameter).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass

from paradyse_lab.app.measure.kernel_bench import measure
from paradyse_lab.app.measure.profile_memory import random_sublayer_params
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.runtime.comm.fake_group import FakeGroup
from paradyse_lab.runtime.training.optim_schedule import global_grad_norm

GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "addmv", "mv", "linear", "addbmm", "dot"})
"""aten operators priced by the GEMM efficiency curve, not counted here."""
UNMARKED_VIEWS = frozenset({"_unsafe_view"})
"""aten operators that return a view of their input without being marked one (`OpOverload.is_view` False):
`_unsafe_view` reshapes a GEMM's output (aten's matmul on 3-D inputs). They move nothing."""
COMM_FUNCTIONS = {"comm": ("all_gather", "reduce_scatter", "all_to_all", "all_reduce"),
                  "comm_p2p": ("exchange", "ring_exchange", "chain_broadcast", "chain_reduce")}
"""Functions of the runtime's collectives and point-to-point modules (by module) whose work the collective fits
price."""


@dataclass(frozen=True)
class OpCount:
    """Launches and memory-bound bytes of one piece of a step, bytes as fixed + per_token x tokens."""

    launches: int
    bytes_fixed: float
    bytes_per_token: float

    def bytes_at(self, tokens: int) -> float:
        return max(0.0, self.bytes_fixed + self.bytes_per_token * tokens)


class _Counter:
    """The dispatch mode's tally; `skip` > 0 inside priced-elsewhere calls."""

    def __init__(self):
        self.launches, self.bytes, self.skip = 0, 0, 0


def _tensor_bytes(values) -> int:
    import torch  # lazy: torch takes seconds to load; only this path runs it

    total = 0
    for v in values:
        if isinstance(v, torch.Tensor):
            total += v.numel() * v.element_size()
        elif isinstance(v, (list, tuple)):
            total += _tensor_bytes(v)
    return total


@contextlib.contextmanager
def counting():
    """Count launches and bytes of the aten operators dispatched inside (module docstring)."""
    # lazy: torch takes seconds to load; only this path runs it
    from torch.utils._python_dispatch import TorchDispatchMode

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.attention import kernels as attention

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import collectives as comm

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import p2p as comm_p2p

    tally = _Counter()

    def skipping(fn):
        def wrapper(*args, **kwargs):
            tally.skip += 1
            try:
                return fn(*args, **kwargs)
            finally:
                tally.skip -= 1
        return wrapper

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if tally.skip:
                return out
            tally.launches += 1  # every dispatch costs its dispatcher and autograd bookkeeping
            if func.is_view or name in UNMARKED_VIEWS or name in GEMM_OPS or name.startswith("empty"):
                return out
            tally.bytes += _tensor_bytes(args) + _tensor_bytes((kwargs or {}).values()) + _tensor_bytes([out])
            return out

    modules = {"comm": comm, "comm_p2p": comm_p2p}
    patched = [(attention, n) for n in ("_run", "_run_masked")]
    patched += [(modules[m], n) for m, names in COMM_FUNCTIONS.items() for n in names]
    originals = [(mod, n, getattr(mod, n)) for mod, n in patched]
    try:
        for mod, n, fn in originals:
            setattr(mod, n, skipping(fn))
        with Mode():
            yield tally
    finally:
        for mod, n, fn in originals:
            setattr(mod, n, fn)


def _sublayer_tally(cfg, kind: str, option: str, p: int, seq_len: int) -> tuple[int, int]:
    """(launches, bytes) of forward + backward of one sub-layer on rank 0 of p (the set-up of
    `measure_kept_bytes`)."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    # lazy: safetensors: only checkpoint paths need it
    from paradyse_lab.runtime.model.parallel_gpt import STRATEGY_MODULES

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.model.sublayer import make_ctx, run_sublayer

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES, shard_sublayer

    opt = StrategyOption.parse(option)
    gen = torch.Generator().manual_seed(0)
    h = cfg.hidden
    shard = shard_sublayer(random_sublayer_params(cfg, kind, gen), kind, 0, p)
    params = [shard[n].requires_grad_() for n in PARAM_NAMES]
    x = torch.randn(1, seq_len // p, h, generator=gen).requires_grad_()  # [b, t, h]
    ctx = make_ctx(cfg, FakeGroup(p, 0), kind, seq_len)
    module = STRATEGY_MODULES[opt.strategy]
    impl = module.ATTENTION if kind == "attention" else module.MLP
    dy = torch.randn(1, seq_len // p, h, generator=gen)
    with counting() as tally:
        run_sublayer(impl, ctx, opt.recompute, x, params).backward(dy)
    return tally.launches, tally.bytes


def _model_tallies(cfg, option: str, p: int, lengths) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """(launches, bytes) of forward + backward of the whole model under `option` on every layer at each of
    `lengths`, and of the AdamW step and zero_grad that follow a training step."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    from paradyse_lab.runtime.model.parallel_gpt import ParallelGPT  # lazy: safetensors: only checkpoint paths need it

    model = ParallelGPT(cfg, FakeGroup(p, 0), seed=0)
    gen = torch.Generator().manual_seed(0)
    plan = [option] * cfg.layers
    tallies = []
    for s in lengths:
        ids = torch.randint(0, cfg.vocab_size, (1, s // p), generator=gen)  # [b, t]
        labels = torch.randint(0, cfg.vocab_size, (1, s // p), generator=gen)
        # as every training step starts: gradients assigned, not added
        model.zero_grad(set_to_none=True)
        with counting() as tally:
            model(ids, plan, labels)[1].backward()
        tallies.append((tally.launches, tally.bytes))
    opt = torch.optim.AdamW(list(model.parameters()), lr=1e-4, weight_decay=0.01)
    opt.step()  # the first step allocates the states; count a later one (the gradients are still there)
    with counting() as tally:
        step_epilogue(model, opt, model.group)
    return tallies, (tally.launches, tally.bytes)


def step_epilogue(model, optimizer, group) -> None:
    """What `optimizer_step` runs after the backward on fp32 CPU weights (no master
    copies; clipping off, validate-run's setting): the global gradient norm, the optimizer step and zero_grad,
    the finite-weights check."""
    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.training.step_health import finite_on_every_rank

    global_grad_norm([(n, t.grad) for n, t in model.named_parameters()], group, model.vocab_parallel)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    finite_on_every_rank(list(model.parameters()), group)


def epilogue_s(cfg, p: int, repeats: int = 5, device=None) -> float:
    """Median seconds of `step_epilogue` on rank 0 of p (a `FakeGroup`: its one-number all-reduces are copies;
    the analytic model prices them as collectives) with every gradient present, as after a backward: the same
    work at every step whatever its length, so timed rather than counted (its gradient norm and finite check
    run boolean and reduction operators the element-wise bandwidth does not price). The gradients are set
    before each timed call, outside the time; the first call, which allocates AdamW's states, is not timed."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    from paradyse_lab.runtime.model.parallel_gpt import ParallelGPT  # lazy: safetensors: only checkpoint paths need it

    device = device or torch.device("cpu")
    model = ParallelGPT(cfg, FakeGroup(p, 0), seed=0).to(device)
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)
    times = []
    for i in range(repeats + 1):
        for w in params:
            w.grad = torch.full_like(w, 1e-3)  # [same shape]: every gradient present, as after a backward
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        step_epilogue(model, optimizer, model.group)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _linear(a: tuple[int, int], b: tuple[int, int], tokens: tuple[int, int]) -> OpCount:
    """`OpCount` through the (launches, bytes) tallies at two token counts."""
    per = (b[1] - a[1]) / (tokens[1] - tokens[0])
    return OpCount(max(a[0], b[0]), float(a[1] - per * tokens[0]), float(per))


def step_counts(cfg, p: int, options, lengths: tuple[int, int],
                model_lengths: tuple[int, int] | None = None) -> dict[str, OpCount]:
    """Counts keyed "OPTION.attention", "OPTION.mlp" per option, "fixed" and "optimizer" (module docstring),
    from tallies of the sub-layers at the two `lengths` and of the whole model at `model_lengths` (default
    the same; distinct, each splitting over p). The embedding backward's traffic is not linear in the tokens
    at a handful of tokens, so the whole model is best counted at lengths a run uses."""
    s1, s2 = lengths
    model_lengths = model_lengths or lengths
    out: dict[str, OpCount] = {}
    for option in options:
        for kind in ("attention", "mlp"):
            out[f"{option}.{kind}"] = _linear(_sublayer_tally(cfg, kind, option, p, s1),
                                              _sublayer_tally(cfg, kind, option, p, s2), (s1, s2))
    first = next(iter(options))
    layers = [out[f"{first}.attention"], out[f"{first}.mlp"]]
    whole, optimizer = _model_tallies(cfg, first, p, model_lengths)
    rest = [(max(w[0] - cfg.layers * sum(c.launches for c in layers), 0),
             w[1] - cfg.layers * sum(c.bytes_at(s) for c in layers)) for w, s in zip(whole, model_lengths)]
    out["fixed"] = _linear(rest[0], rest[1], model_lengths)
    out["optimizer"] = OpCount(optimizer[0], float(optimizer[1]), 0.0)
    return out


def runtime_dispatch_s(cfg, p: int, seq_len: int, strategies, bytes_per_s: float, device=None, dtype=None) -> float:
    """Seconds per launch of the runtime's own training step on rank 0 of p (module docstring): forward +
    backward of the whole model under each of `strategies` on every layer at `seq_len` tokens (the shortest that
    splits: arithmetic negligible), timed (median) less what it moves at `bytes_per_s` (the counted bytes,
    and the GEMMs' weights read twice and their gradients written once, 3 x the rank's GEMM weights), summed
    over the strategies and divided by the launches counted in the same steps."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    from paradyse_lab.runtime.model.parallel_gpt import ParallelGPT  # lazy: safetensors: only checkpoint paths need it

    device = device or torch.device("cpu")
    model = ParallelGPT(cfg, FakeGroup(p, 0), seed=0).to(device=device, dtype=dtype or torch.float32)
    gemm_weights = [w for w in model.layers.parameters() if w.dim() == 2] + [model.wte]
    weight_bytes = 3 * sum(w.numel() * w.element_size() for w in gemm_weights)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (1, seq_len // p), generator=gen).to(device)  # [b, t]
    labels = torch.randint(0, cfg.vocab_size, (1, seq_len // p), generator=gen).to(device)
    seconds, launches = 0.0, 0
    for option in strategies:
        def step(plan=[option] * cfg.layers):
            model.zero_grad(set_to_none=True)  # as every training step starts
            model(ids, plan, labels)[1].backward()

        step()
        with counting() as tally:
            step()
        sec = measure(step, device, warmup=1, max_repeats=20, min_repeats=5, target_s=0.3)[0]
        seconds += max(sec - (tally.bytes + weight_bytes) / bytes_per_s, 0.0)
        launches += tally.launches
    return seconds / launches if launches else 0.0
