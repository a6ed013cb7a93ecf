"""Record the operations one rank issues, from the runtime's own code, without math or memory.

Library module (no command). `recording()` opens a `TorchDispatchMode` that turns every aten operator into a
`paradyse_lab.costmodel.replay.ops.Op` (gemm with m, n, k; element-wise with the bytes it reads and writes; a
view or allocation as host-only work), and, while it is open, wraps the runtime's own entry points so that what
they run is one operation, whatever runs underneath:
- attention: `paradyse_lab.runtime.attention.kernels.run_kernels`, through which every attention kernel call
  passes (dense and varlen, whichever kernel the runtime picks: flash-attn, PyTorch's fused kernels or exact math): one
  `attention` op with the query / key lengths, heads, head dimension, causality and the kernel that ran;
- communication: `paradyse_lab.runtime.comm.collectives`'s all_gather, reduce_scatter, all_to_all (even, or with
  unequal parts: priced as the even one at its largest part), all_reduce and
  `paradyse_lab.runtime.comm.p2p.exchange` (every ring step and chain): one `collective` or `p2p` op with its
  bytes and group size (a fake group's local copies and a real group's c10d operators alike are folded into it), and
  each exchange's `Pending.wait()` as a `wait` op.
An attention operator of aten seen outside those wrappers (a kernel called directly) is still an `attention`
op. The same recorder runs on a real process group (the tests count a gloo run with it), so a trace on meta
tensors through `paradyse_lab.runtime.comm.fake_group.FakeGroup` can be checked operator for operator against a real
run.

`trace_sublayer(cfg, kind, option, seq_len, p)` records one sub-layer's forward and backward on rank 0 as the
layer stack runs it (`run_sublayer`, weights and resident gradients as in training) on the meta device, each
distinct meta kernel call run once (`meta_memo.MetaMemo`).
"""

from __future__ import annotations

import contextlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from paradyse_lab.costmodel.replay.ops import Op
from paradyse_lab.runtime.attention import kernels as attention
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm import p2p as comm_p2p
from paradyse_lab.runtime.trace.meta_memo import MetaMemo

GEMM_OPS = {"mm", "addmm", "bmm", "baddbmm", "addbmm"}
ALLOC_OPS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "lift_fresh", "set_"}
ALIAS_OPS = {"_unsafe_view", "_reshape_alias", "alias"}
"""Operators that return a view of their input without their schema saying so (no kernel runs)."""
COLLECTIVES = ("all_gather", "reduce_scatter", "all_to_all", "all_reduce")


def _dtype(x) -> str:
    return str(x.dtype).replace("torch.", "")


def _tensors(tree) -> list[torch.Tensor]:
    out = []
    for x in tree:
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            out.extend(_tensors(x))
    return out


def _nbytes(x: torch.Tensor) -> int:
    return x.numel() * x.element_size()


def _gemm(name: str, args) -> Op:
    """m, n, k (and the batch) of a matrix-product operator from its operand shapes."""
    if name in ("addmm", "baddbmm", "addbmm"):
        args = args[1:]
    a, b = args[0], args[1]
    batch = a.shape[0] if a.dim() == 3 else 1
    return Op("gemm", name, _dtype(a), m=a.shape[-2], n=b.shape[-1], k=a.shape[-1], batch=batch)


def _aten_attention(name: str, args) -> Op:
    """An aten attention operator called outside `run_kernels` (q [b, H, s, d], k [b, KV, s, d])."""
    q, k = args[0], args[1]
    causal = next((a for a in args[3:] if isinstance(a, bool)), False)
    return Op("attention", name, _dtype(q), batch=q.shape[0], sq=q.shape[-2], sk=k.shape[-2], heads=q.shape[1],
              kv_heads=k.shape[1], head_dim=q.shape[-1], causal=causal, kernel=name,
              which="backward" if "backward" in name else "forward")


def classify(func, args, out) -> Op:
    """The `Op` of one aten operator call."""
    name = func._schema.name.split("::")[-1]
    if name in GEMM_OPS:
        return _gemm(name, args)
    if "scaled_dot_product" in name or "flash_attention" in name or "efficient_attention" in name:
        return _aten_attention(name, args)
    if getattr(func, "is_view", False) or name in ALLOC_OPS | ALIAS_OPS or name.startswith("_local_scalar"):
        return Op("host", name)
    ins, outs = _tensors(args), _tensors(out if isinstance(out, (list, tuple)) else [out])
    devices = {x.device.type for x in ins + outs}
    dtype = _dtype(outs[0]) if outs else (_dtype(ins[0]) if ins else "")
    if "cpu" in devices and len(devices) > 1:
        return Op("host_copy", name, dtype, nbytes=sum(_nbytes(x) for x in outs))
    written = [x for x in outs if not any(x is y for y in ins)]  # an in-place result is the input written back
    return Op("elementwise", name, dtype, nbytes=sum(_nbytes(x) for x in ins) + sum(_nbytes(x) for x in written))


class OpRecorder(TorchDispatchMode):
    """Collects an `Op` per aten operator dispatched, except inside a folded entry point (module docstring)."""

    def __init__(self):
        super().__init__()
        self.ops: list[Op] = []
        self.folded = 0
        self.exchanges = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not self.folded:
            self.ops.append(classify(func, args, out))
        return out

    @contextlib.contextmanager
    def fold(self, op: Op | None = None):
        """Record `op` (if given) and none of the operators run inside the block."""
        if op is not None and not self.folded:
            self.ops.append(op)
        self.folded += 1
        try:
            yield
        finally:
            self.folded -= 1


def _attention_op(which: int, q, args, kernel: str) -> Op:
    """The attention op of one `run_kernels` call: args are (q, k, v, ..., causal, scale) forward and
    (do, q, k, v, o, lse, ..., causal, scale) backward; q [b, H, s, d], k [b, KV, s, d]."""
    k = args[1] if which == 0 else args[2]
    causal = next(a for a in reversed(args) if isinstance(a, bool))
    return Op("attention", "attention", _dtype(q), batch=q.shape[0], sq=q.shape[-2], sk=k.shape[-2],
              heads=q.shape[1], kv_heads=k.shape[1], head_dim=q.shape[-1], causal=causal, kernel=kernel,
              which=("forward", "backward")[which])


@contextlib.contextmanager
def recording():
    """Record every operation issued inside the block: `with recording() as rec: ...; rec.ops`."""
    rec = OpRecorder()
    patches = []

    def patch(module, name, wrapper):
        real = getattr(module, name)
        patches.append((module, name, real))
        setattr(module, name, wrapper(real))

    def kernels(real):
        def run(which, q, table, order, *args):
            with attention.kernels_used() as ran:
                with rec.fold():
                    result = real(which, q, table, order, *args)
            if not rec.folded:
                rec.ops.append(_attention_op(which, q, args, "+".join(sorted(ran))))
            return result
        return run

    def collective(op):
        def wrap(real):
            def call(x, group=None, *rest, **kw):
                p = comm.size(group)
                nbytes = _nbytes(x) * (p if op == "all_gather" else 1)  # S: the gathered output, else the input
                with rec.fold(Op("collective", op, _dtype(x), nbytes=nbytes, group=p) if p > 1 else None):
                    return real(x, group, *rest, **kw)
            return call
        return wrap

    def uneven_all_to_all(real):
        def call(parts, out_numels, group=None):
            p = comm.size(group)
            largest = max(max(x.numel() for x in parts), max(out_numels))  # every rank's parts include the widest
            nbytes = p * largest * parts[0].element_size()  # S: the even all-to-all at the largest part (its price)
            with rec.fold(Op("collective", "all_to_all", _dtype(parts[0]), nbytes=nbytes, group=p) if p > 1 else None):
                return real(parts, out_numels, group)
        return call

    def exchange(real):
        def call(send, dst, src, recv_like=None, group=None, tag=0):
            like = send if send is not None else recv_like
            op = None
            if send is not None or src is not None:
                rec.exchanges += 1
                op = Op("p2p", "exchange", _dtype(like), nbytes=_nbytes(send) if send is not None else 0,
                        group=comm.size(group), ref=rec.exchanges)
            with rec.fold(op):
                pending = real(send, dst, src, recv_like, group, tag)
            pending.trace_ref = op.ref if op is not None else 0
            return pending
        return call

    def wait(real):
        def call(self):
            ref = getattr(self, "trace_ref", 0)
            with rec.fold(Op("wait", "wait", ref=ref) if ref else None):
                return real(self)
        return call

    try:
        patch(attention, "run_kernels", kernels)
        for op in COLLECTIVES:
            patch(comm, op, collective(op))
        patch(comm, "all_to_all_uneven", uneven_all_to_all)
        patch(comm_p2p, "exchange", exchange)
        patch(comm_p2p.Pending, "wait", wait)
        with rec:
            yield rec
    finally:
        for module, name, real in reversed(patches):
            setattr(module, name, real)


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
META_MEMO = MetaMemo(ALIAS_OPS)
"""The meta kernels' results this process has seen (`trace_sublayer`'s, every trace of the process)."""


def full_sublayer_shapes(cfg, kind: str) -> dict[str, tuple[int, ...]]:
    """The full (unsharded) parameter shapes of one sub-layer of `cfg`
    (paradyse_lab.core.model_spec.ModelSpec), in
    `PARAM_NAMES` order: ln_w, ln_b, w1 [n1, h], b1 [n1], w2 [n2, h], b2 [h]; empty where the model has none."""
    h = cfg.hidden
    d = h // cfg.heads
    kv = (cfg.kv_heads or cfg.heads) * d
    f = cfg.ffn_hidden or 4 * h
    layernorm = cfg.norm == "layernorm"
    if kind == "attention":
        n1, n2 = h + 2 * kv, h
        b1 = cfg.bias or getattr(cfg, "qkv_bias", False)
    else:
        n1, n2 = (2 * f if cfg.ffn_kind == "swiglu" else f), f
        b1 = cfg.bias
    return {"ln_w": (h,), "ln_b": (h,) if layernorm else (0,), "w1": (n1, h), "b1": (n1,) if b1 else (0,),
            "w2": (n2, h), "b2": (h,) if cfg.bias else (0,)}


def sublayer_inputs(cfg, kind: str, seq_len: int, p: int, batch: int, dtype, device, rank: int = 0):
    """Rank `rank`'s parameters (with resident gradients, as the layer stack trains) and input
    x [b, s/p, h] of one sub-layer; on the meta device nothing is allocated."""
    from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES, shard_sublayer

    full = {n: torch.zeros(shape, device=device, dtype=dtype)
            for n, shape in full_sublayer_shapes(cfg, kind).items()}
    shards = shard_sublayer(full, kind, rank, p)
    params = []
    for n in PARAM_NAMES:
        t = shards[n].detach().requires_grad_()
        t.grad = torch.zeros_like(t)
        params.append(t)
    x = torch.zeros(batch, seq_len // p, cfg.hidden, device=device, dtype=dtype, requires_grad=True)
    return params, x


def run_sublayer_step(cfg, kind: str, option, seq_len: int, group, params, x, mlp_tile: int = 0) -> None:
    """One sub-layer's forward and backward under `option` (a `StrategyOption`) on this rank, as
    `ParallelGPT` runs it: `+tiled` MLPs over `mlp_tile` positions (0: ALST's rule), `+offload` through an
    `Offloader`."""
    from paradyse_lab.costmodel.techniques import mlp_tile_positions
    from paradyse_lab.runtime.model.parallel_gpt import run_option
    from paradyse_lab.runtime.model.sublayer import make_ctx
    from paradyse_lab.runtime.strategies.offload import Offloader

    ctx = make_ctx(cfg, group, kind, seq_len, tag=f"layers.0.{kind}", device=x.device)
    tile = mlp_tile or mlp_tile_positions(cfg.hidden, x.shape[0] * x.shape[1])
    offload = Offloader(x.device).sublayer(ctx.tag, params) if option.offload else contextlib.nullcontext()
    with offload:
        y = run_option(option, ctx, x, params, tile)
    y.backward(torch.ones_like(y))


def trace_sublayer(cfg, kind: str, option, seq_len: int, p: int, batch: int = 1, dtype: str = "bf16",
                   rank: int = 0, mlp_tile: int = 0, device: str = "cpu") -> list[Op]:
    """The operations rank `rank` of p issues for one sub-layer's forward and backward on a `device` ('cpu',
    'cuda'), traced on meta tensors through a fake process group, warm (`warm_trace`): the attention kernels are
    the ones the runtime picks on `device`, not on the meta device. A repeated meta kernel call (the warm-up's, an
    earlier trace's) is answered from `META_MEMO` instead of running torch's Python reference again."""
    from paradyse_lab.runtime.comm.fake_group import FakeGroup

    params, x = sublayer_inputs(cfg, kind, seq_len, p, batch, DTYPES[dtype], "meta", rank)

    def on_device(q):  # the kernel choice of the device the trace stands for
        return attention.kernel_for(device if q.device.type == "meta" else q.device.type, q.dtype)

    chosen, attention.backend = attention.backend, on_device
    try:
        with META_MEMO:  # each distinct meta kernel call once per process (`MetaMemo`)
            return warm_trace(lambda: run_sublayer_step(cfg, kind, option, seq_len, FakeGroup(p, rank), params, x,
                                                        mlp_tile))
    finally:
        attention.backend = chosen


def warm_trace(step) -> list[Op]:
    """The operations of `step()`'s second call: the first fills the runtime's caches (index tensors built once
    per shape, lazily initialised kernels), as every step after a run's first finds them."""
    step()
    with recording() as rec:
        step()
    return rec.ops
