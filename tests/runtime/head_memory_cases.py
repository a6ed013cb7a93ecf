"""The head-and-loss memory cases shared by tests/runtime/test_head_memory.py (fp32, CPU, torch's profiler) and
tests/gpu/test_runtime_gpu.py (bf16, CUDA's allocator): a forward and backward of the whole head or the tiled loss,
or the vocabulary-parallel loss of one rank, and the bounds its peak bytes must lie in by the cost model's count."""

from contextlib import contextmanager

import torch

from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.costmodel import head_loss
from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.costmodel.head_loss import tiled_head_bytes, vocab_head_bytes
from paradyse_lab.runtime.model.tiled_loss import tiled_head_loss, whole_head_loss
from paradyse_lab.runtime.model.vocab_parallel import vocab_parallel_loss

T, H, V = 256, 8, 8192
CHUNK = 16
"""Rows per chunk of the cross-entropy here: several chunks per tile, so a whole fp32 [t, V] would show."""


def _spec(dtype: str) -> ModelSpec:
    return ModelSpec(name="head-memory", hidden=H, heads=1, layers=1, ffn_hidden=16, vocab_size=V, max_positions=0,
                     dtype=dtype, norm="rmsnorm", ffn_kind="swiglu", bias=False, tied=False)


def _inputs(dtype):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, T, H, generator=gen).to(dtype).requires_grad_()
    lnf_w = torch.ones(H, dtype=dtype, requires_grad=True)
    lnf_b = torch.zeros(0, dtype=dtype, requires_grad=True)
    head = (0.2 * torch.randn(V, H, generator=gen)).to(dtype).requires_grad_()
    labels = torch.randint(0, V, (1, T), generator=gen)
    return x, lnf_w, lnf_b, head, labels


def head_case(dtype: str, head: str, device: str = "cpu"):
    """(step, lower, upper): a head-and-loss forward and backward, and the bounds its peak bytes above the start
    must lie in (the cost model's kept + transient, plus the small [t, h] and [V, h] gradients)."""
    spec = _spec(dtype)
    x, lnf_w, lnf_b, head_w, labels = (t.to(device).detach().requires_grad_(t.requires_grad) if t.is_floating_point()
                                       else t.to(device) for t in _inputs(torch.float32 if dtype == "fp32"
                                                                          else torch.bfloat16))
    tile = T // 4 if head in ("tiled", "vocab") else 0  # four tiles: a tile's buffers, not [t, V], set the peak

    def step():
        with _chunk_rows(CHUNK):
            if head == "vocab":  # one rank's vocabulary-parallel loss (no group: R = V, nothing gathered)
                loss = vocab_parallel_loss(x, lnf_w, lnf_b, head_w, labels, 1e-5, tile, None, V)
            else:
                loss = (tiled_head_loss(x, lnf_w, lnf_b, head_w, labels, 1e-5, tile) if tile
                        else whole_head_loss(x, lnf_w, lnf_b, head_w, labels, 1e-5))
            loss.backward()

    with _chunk_rows(CHUNK):
        return (step, *_bounds(spec, head, tile))


@contextmanager
def _chunk_rows(rows: int):
    """The chunked cross-entropy works `rows` rows at a time (runtime and cost model alike) inside the block."""
    saved = head_loss.CE_CHUNK_BYTES
    head_loss.CE_CHUNK_BYTES = 4 * V * rows
    try:
        yield
    finally:
        head_loss.CE_CHUNK_BYTES = saved


def _bounds(spec, head: str, tile: int) -> tuple[int, int]:
    e = spec.dtype_bytes
    if head == "tiled":  # the cost model's tile is set by LOSS_TILE_BYTES; this test's is T / 4
        kept, transient = tiled_head_bytes(spec, T, tile)
    elif head == "vocab":
        kept, transient = vocab_head_bytes(spec, 1, T, tile)
    else:  # what the analytic model's `fixed` charges for the whole head
        fixed = AnalyticCostModel(spec, get_cluster("a100-80gb-x8"), p=1).fixed(T)
        kept, transient = fixed.kept_bytes, fixed.transient_bytes
    kept -= T * H * e  # the embedding output is the model's, not the head's
    small = 4 * (T * H + V * H) * 4  # gradients of x, the norm weight and W, and their fp32 copies
    return kept + transient, kept + transient + small
