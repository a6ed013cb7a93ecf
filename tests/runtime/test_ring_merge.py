"""The ring's lighter merge and dK/dV accumulator against the general ones they replace on one document.

Run: `python -m pytest -q tests/runtime/test_ring_merge.py`. `merge_seen` (every row has seen a key on both
sides) must give what `merge_partials` gives, in fp32 and with a bf16 block; the zig-zag ring blocks of every
rank merged with it must equal one kernel over the whole sequence; `_kv_grads` must equal a zero accumulator
with the block's rows added.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from paradyse_lab.runtime.attention.kernels import attention_forward, merge_partials, merge_seen
from paradyse_lab.runtime.attention.ring import _block_forward, _kv_grads
from paradyse_lab.runtime.model.layout import local_positions


@pytest.mark.parametrize("block_dtype", [torch.float32, torch.bfloat16])
def test_merge_seen_equals_merge_partials(block_dtype):
    """Both merges against the fp64 merge of the same inputs: merge_seen within fp32 rounding of it, and no
    further from it than merge_partials (both round differently, so they are compared through the fp64 one)."""
    gen = torch.Generator().manual_seed(0)
    out, block_out = (torch.randn(2, 3, 16, 8, generator=gen) for _ in range(2))
    lse = torch.randn(2, 3, 16, generator=gen) * 30  # differences far past exp's range on either side
    block_lse = torch.randn(2, 3, 16, generator=gen) * 30
    block_out = block_out.to(block_dtype)
    exact_out, exact_lse = out.double(), lse.double()
    merge_partials(exact_out, exact_lse, block_out.double(), block_lse.double())
    general_out, general_lse = out.clone(), lse.clone()
    merge_partials(general_out, general_lse, block_out, block_lse)
    merge_seen(out, lse, block_out, block_lse)
    for got, general, exact in ((out, general_out, exact_out), (lse, general_lse, exact_lse)):
        assert got.dtype == torch.float32
        assert_close(got.double(), exact, rtol=1e-6, atol=1e-6)
        assert (got.double() - exact).abs().max() <= 2 * (general.double() - exact).abs().max() + 1e-7


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("p", [2, 3])
def test_ring_blocks_merged_with_merge_seen_equal_the_whole(causal, p):
    gen = torch.Generator().manual_seed(1)
    s = 4 * p * 3
    q = torch.randn(1, 4, s, 8, generator=gen)
    k, v = (torch.randn(1, 2, s, 8, generator=gen) for _ in range(2))
    want_out, want_lse = attention_forward(q, k, v, causal)
    t = s // p
    for r in range(p):
        pos = local_positions(s, p, r, None)
        out = lse = None
        for i in range(p):  # the ring's order: its own block first, which starts the accumulators
            src = (r - i) % p
            kpos = local_positions(s, p, src, None)
            qs, o_b, lse_b = _block_forward(q[:, :, pos], k[:, :, kpos], v[:, :, kpos], r, src, t, causal, None)
            if out is None:
                assert qs == slice(0, t)
                out, lse = o_b.clone(), lse_b.clone()
            else:
                merge_seen(out[:, :, qs], lse[:, :, qs], o_b, lse_b)
        assert_close(out, want_out[:, :, pos], rtol=1e-5, atol=1e-5)
        assert_close(lse, want_lse[:, :, pos], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ks", [slice(0, 6), slice(0, 3), slice(3, 6)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kv_grads_pad_the_block_rows_with_zeros(ks, dtype):
    gen = torch.Generator().manual_seed(2)
    n = ks.stop - ks.start
    dk, dv = (torch.randn(1, 2, n, 4, generator=gen).to(dtype) for _ in range(2))
    want = torch.zeros(2, 1, 2, 6, 4)
    want[0][:, :, ks] += dk.float()
    want[1][:, :, ks] += dv.float()
    got = _kv_grads(dk, dv, ks, 6)
    assert got.dtype == torch.float32
    assert torch.equal(got, want)
