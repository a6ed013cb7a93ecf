"""The tiled loss (runtime/model/tiled_loss.py) on one process: what it keeps for the backward is the cost model's count
byte for byte (paradyse_lab/costmodel/head_loss.py), and its loss and gradients equal the whole head's in bf16
too. Exactness at p = 1..4 under every strategy: runtime_cases.py `tiled-loss-*`."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from paradyse_lab.app.measure.profile_memory import KeptRecorder
from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.costmodel.head_loss import loss_tile_tokens, tiled_loss_kept_bytes
from paradyse_lab.runtime.model.reference import norm
from paradyse_lab.runtime.model.tiled_loss import tiled_head_loss

SPEC = ModelSpec(name="head-test", hidden=32, heads=4, layers=1, ffn_hidden=64, vocab_size=96, max_positions=0,
                 dtype="bf16", norm="rmsnorm", ffn_kind="swiglu", bias=False, tied=False)


def _inputs(dtype, tokens: int = 37, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    h, v = SPEC.hidden, SPEC.vocab_size
    x = torch.randn(1, tokens, h, generator=gen).to(dtype).requires_grad_()
    lnf_w = (1 + 0.1 * torch.randn(h, generator=gen)).to(dtype).requires_grad_()
    lnf_b = torch.zeros(0, dtype=dtype, requires_grad=True)
    head = (0.2 * torch.randn(v, h, generator=gen)).to(dtype).requires_grad_()
    labels = torch.randint(0, v, (1, tokens), generator=gen)
    labels[0, :4] = -100
    return x, lnf_w, lnf_b, head, labels


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tiled_loss_keeps_only_the_norm_input(dtype):
    x, lnf_w, lnf_b, head, labels = _inputs(dtype)
    with KeptRecorder(exclude=(lnf_w, lnf_b, head, labels)) as rec:
        tiled_head_loss(x, lnf_w, lnf_b, head, labels, 1e-5, 8)
    spec = SPEC if dtype == torch.bfloat16 else ModelSpec(**{**SPEC.__dict__, "dtype": "fp32"})
    assert rec.nbytes == tiled_loss_kept_bytes(spec, x.shape[1]) == x.numel() * x.element_size()


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_tiled_loss_equals_the_whole_head(dtype, tol):
    whole, tiled = _inputs(dtype), _inputs(dtype)
    x, lnf_w, lnf_b, head, labels = whole
    logits = norm(x, lnf_w, lnf_b, 1e-5) @ head.t()  # [1, t, h] -> [1, t, V]
    ref = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
    (2.5 * ref).backward()
    loss = tiled_head_loss(*tiled, 1e-5, 5)
    (2.5 * loss).backward()
    assert_close(loss, ref.detach(), rtol=tol, atol=tol)
    for a, b in zip(tiled[:4], whole[:4]):
        if a.numel():
            assert_close(a.grad.float(), b.grad.float(), rtol=tol, atol=tol)


def test_tile_tokens_bound_the_logits():
    assert loss_tile_tokens(128256, 2, 10**6) == 2**30 // (128256 * 6)
    assert loss_tile_tokens(128256, 2, 100) == 100 and loss_tile_tokens(2**40, 4, 100) == 1
