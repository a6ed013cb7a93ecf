"""What the profiles' memory columns are measured with: the activations a forward keeps for backward (kept_bytes,
exact on every device), every model state held resident as in training, and the point a step's peak is measured
from. The whole-model profiler (`profiler`) and the layer-stack profiler (`stack_profile`) use them;
`step_counts` draws its sub-layers' parameters with `random_sublayer_params`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace

from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.formulas import model_state_bytes_per_param
from paradyse_lab.costmodel.techniques import mlp_tile_positions
from paradyse_lab.runtime.comm.fake_group import FakeGroup

# --- kept activations -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class KeptTensor:
    """One storage kept for backward."""

    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    """Bytes of the whole storage it lives in (what stays allocated)."""


class KeptRecorder:
    """Context manager recording the tensors saved for backward inside it (`saved_tensors_hooks`).

    "Kept activation" (the analytic model's `kept_bytes`): every
    storage the forward hands to autograd to keep until the backward, counted once (deduplicated by storage,
    so q/k/v views of one qkv buffer count as that buffer, and a tensor saved twice counts once), at the
    size of its whole storage (a saved view keeps its whole storage alive), **excluding** the storages of
    `exclude` (the parameters / weight shards: model states, counted by `model_state_bytes`). The sub-layer
    input x is included (it is kept), the sub-layer output is not (the next sub-layer keeps it as its input).
    Tensors kept by a `torch.autograd.Function` outside `save_for_backward` would be invisible: the runtime's
    `SubLayerFunction` saves everything through `save_for_backward` for this reason.
    """

    def __init__(self, exclude=()):
        self._exclude = {_storage_key(t) for t in exclude}
        self.kept: dict[tuple, KeptTensor] = {}

    def _pack(self, t):
        key = _storage_key(t)
        if key not in self._exclude and key not in self.kept:
            self.kept[key] = KeptTensor(tuple(t.shape), str(t.dtype).replace("torch.", ""),
                                        t.untyped_storage().nbytes())
        # A detached view (same storage, no copy), never `t` itself: a saved output returned as is makes the
        # cycle tensor -> grad_fn -> saved variable -> tensor through C++, which Python's garbage collector
        # cannot see, so the recorded forward's graph, and every activation it keeps, would never be freed
        # unless a backward ran (tests/paradyse_lab/app/measure/test_profile_peaks.py).
        return t.detach()

    def _unpack(self, packed):
        return packed

    def __enter__(self):
        import torch  # lazy: torch takes seconds to load; only this path runs it

        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        return False

    @property
    def nbytes(self) -> int:
        """Total kept bytes."""
        return sum(k.nbytes for k in self.kept.values())


def _storage_key(t) -> tuple:
    s = t.untyped_storage()
    return (str(t.device), s.data_ptr(), s.nbytes())


def random_sublayer_params(cfg, kind: str, gen) -> dict:
    """Whole (unsharded) parameters of one sub-layer ('attention' or 'mlp') of `cfg`: unit norm, zero biases
    (empty when `cfg` has none), weights N(0, 0.02) drawn from `gen`."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    h = cfg.hidden
    n1, n2 = cfg.sublayer_shapes(kind)
    nb, bias = (h if cfg.norm == "layernorm" else 0), cfg.bias
    return {"ln_w": torch.ones(h), "ln_b": torch.zeros(nb), "b2": torch.zeros(h if bias else 0),
            "w1": torch.randn(n1, h, generator=gen) * 0.02, "b1": torch.zeros(n1 if bias else 0),
            "w2": torch.randn(n2, h, generator=gen) * 0.02}


def measure_kept_bytes(kind: str, strategy: str, recompute: bool, cfg, p: int, seq_len: int, batch: int = 1,
                       rank: int = 0, dtype=None, device="cpu", seed: int = 0, cu_seqlens=None,
                       mlp_tile: int = 0) -> KeptRecorder:
    """Kept activations of one sub-layer ('attention' or 'mlp') of `cfg`
    (paradyse_lab.core.model_spec.ModelSpec)
    under `strategy` (a name, or an option `NAME[+recompute][+tiled][+offload]`) on rank `rank` of a p-rank world
    emulated by a `FakeGroup` (no process group needed); `cu_seqlens`: the sequence is a pack of documents;
    `mlp_tile`: positions per chunk of a tiled MLP (0: ALST's rule). The record's
    `host_bytes`: what `+offload` moved to host memory (what it keeps on the device is the record itself)."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    from paradyse_lab.runtime.model.parallel_gpt import run_option  # lazy: safetensors: only checkpoint paths need it

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.model.sublayer import make_ctx

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES, shard_sublayer

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.strategies.offload import Offloader

    dtype = dtype or torch.float32
    gen = torch.Generator().manual_seed(seed)
    h = cfg.hidden
    shard = shard_sublayer(random_sublayer_params(cfg, kind, gen), kind, rank, p)
    params = [shard[n].to(device=device, dtype=dtype).requires_grad_() for n in PARAM_NAMES]
    x = torch.randn(batch, seq_len // p, h, generator=gen).to(device=device, dtype=dtype).requires_grad_()
    group = FakeGroup(p, rank)
    ctx = make_ctx(cfg, group, kind, seq_len, device=device, cu_seqlens=cu_seqlens)
    option = StrategyOption.parse(strategy)
    option = replace(option, recompute=option.recompute or recompute)
    offloader = Offloader(torch.device(device))
    with KeptRecorder(exclude=params) as rec:
        with offloader.sublayer(ctx.tag, params) if option.offload else contextlib.nullcontext():
            y = run_option(option, ctx, x, params, mlp_tile or mlp_tile_positions(h, seq_len // p))
    rec.output = y  # keep the graph alive while the caller inspects the record
    rec.host_bytes = offloader.stats.to_host.get(ctx.tag, 0)
    return rec


# --- model states and the peak -------------------------------------------------------------------------

def resident_model_states(params, spec, device):
    """Make every model state resident, as in training and as the cost model counts them
    (`formulas.model_state_bytes_per_param`: 16 bytes per parameter, fp32 or bf16 mixed precision):
    gradients allocated now (zeros, accumulated into, never freed) and the optimizer states that the
    parameters' own weight and gradient bytes leave (Adam's m, v and, in bf16, the fp32 master weights) as
    one untouched buffer. Returns (that buffer, all model-state bytes)."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    params = list(params)
    for q in params:
        if q.grad is None:
            q.grad = torch.zeros_like(q)
    n = sum(q.numel() for q in params)
    own = sum(2 * q.numel() * q.element_size() for q in params)  # weights + gradients
    optimizer_bytes = max(0, n * model_state_bytes_per_param(spec) - own)
    return torch.empty(optimizer_bytes, dtype=torch.uint8, device=device), own + optimizer_bytes


def reset_peak(device) -> None:
    """The point from which a profile's peak is measured: nothing of an earlier step may be alive here
    (tests/paradyse_lab/app/measure/test_profile_peaks.py checks that no tensor saved for backward is still
    reachable)."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
