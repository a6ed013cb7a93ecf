"""Packed sequences on one process: the pack's offsets and labels, the document mask, the masked kernel
(rows that see no key), the merge of such rows, and the single-device reference against running each
document alone. The distributed equivalence of every strategy is in runtime_cases.py (`packed-*` cases).

Run: `python -m pytest -q tests/runtime/test_packed.py`.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime.attention import kernels as attention
from paradyse_lab.runtime.attention.kernels import attention_backward, attention_forward, merge_partials
from paradyse_lab.runtime.model.layout import layout_documents, layout_unit, local_positions
from paradyse_lab.runtime.model.packed import (
    IGNORE,
    block_diagonal_mask,
    check_cu_seqlens,
    cu_seqlens,
    document_mask,
    document_of,
    documents_of,
    pack_labels,
    pack_sequence,
    rank_attention_pairs,
)
from paradyse_lab.runtime.model.reference import ReferenceGPT, init_state_dict


@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_every_document_is_padded_to_the_layout_unit_by_a_padding_segment(p):
    pack = pack_sequence([1, 13, 5, 1, 22], p)  # 42 tokens
    unit = layout_unit(p)  # 2p, 1 at p = 1
    assert pack.paddings == tuple(-n % unit for n in (1, 13, 5, 1, 22))
    assert pack.padded_len == sum(-(-n // unit) * unit for n in (1, 13, 5, 1, 22))
    segments = [x for n, pad in zip(pack.documents, pack.paddings) for x in ((n, pad) if pad else (n,))]
    assert cu_seqlens(pack).tolist() == [0, *torch.tensor(segments).cumsum(0).tolist()]
    assert cu_seqlens(pack).dtype == torch.int32
    assert layout_documents(cu_seqlens(pack), p) == tuple(n + pad for n, pad in zip(pack.documents, pack.paddings))
    doc, pos = document_of(cu_seqlens(pack), torch.arange(pack.padded_len))
    assert doc[:1].tolist() == [0] and pos[:3].tolist() == ([0, 0, 1] if p > 1 else [0, 0, 1])
    ranks = [local_positions(pack.padded_len, p, r, cu_seqlens(pack)) for r in range(p)]
    assert sorted(torch.cat(ranks).tolist()) == list(range(pack.padded_len))  # every token on one rank
    assert all(len(x) == pack.padded_len // p and bool((x[1:] > x[:-1]).all()) for x in ranks)  # increasing


@pytest.mark.parametrize("p", [2, 3, 4])
def test_each_document_is_cut_into_2p_chunks_and_rank_r_holds_chunks_r_and_2p_minus_1_minus_r(p):
    pack = pack_sequence([3, 4 * p], p)  # 3 pads to 2p; 2p | 4p: the second document has no padding
    first = 2 * p  # the first document padded to 2p: one token per chunk
    for r in range(p):
        c = 2  # 4p / 2p tokens per chunk of the second document
        want = [r, 2 * p - 1 - r, *range(first + r * c, first + (r + 1) * c),
                *range(first + (2 * p - 1 - r) * c, first + (2 * p - r) * c)]
        assert local_positions(pack.padded_len, p, r, cu_seqlens(pack)).tolist() == want


def test_labels_stop_at_each_document_end_and_skip_padding():
    pack = pack_sequence([3, 1, 2], 2)  # 4 + 4 + 4 tokens: each document padded to 2p = 4
    tokens = torch.arange(10, 22).view(1, 12)
    want = [[11, 12, IGNORE, IGNORE] + [IGNORE] * 4 + [19, IGNORE, IGNORE, IGNORE]]
    assert pack_labels(pack, tokens).tolist() == want
    assert [d.tolist() for d in documents_of(pack, tokens)] == [[[10, 11, 12]], [[14]], [[18, 19]]]


@pytest.mark.parametrize("bad", [[], [3, 0], [2, -1]])
def test_pack_refuses_empty_documents(bad):
    with pytest.raises(UserInputError, match="positive length"):
        pack_sequence(bad, 2)


@pytest.mark.parametrize("cu", [[1, 4], [0, 3, 3, 8], [0, 5], [0]])
def test_cu_seqlens_must_cover_the_sequence(cu):
    with pytest.raises(UserInputError, match="cu_seqlens"):
        check_cu_seqlens(torch.tensor(cu), 8)


def test_document_mask_is_same_document_and_causal_by_position():
    cu = torch.tensor([0, 2, 5])
    causal = block_diagonal_mask(cu, True).int().tolist()
    assert causal == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 1]]
    bidir = block_diagonal_mask(cu, False).int().tolist()
    assert bidir[0] == [1, 1, 0, 0, 0] and bidir[4] == [0, 0, 1, 1, 1]
    doc, pos = document_of(cu, torch.tensor([4, 1]))
    assert doc.tolist() == [1, 0] and pos.tolist() == [2, 1]
    assert document_mask(doc, pos, doc, pos, True).tolist() == [[True, False], [False, True]]


def _softmax_reference(q, k, v, mask):
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5  # [b, H, sq, sk]
    scores = scores.masked_fill(~mask, float("-inf"))
    prob = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # rows without keys: 0
    return prob @ v


def test_masked_kernel_rows_without_keys_give_zero_and_no_nan():
    gen = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(2, 3, 5, 4, generator=gen, dtype=torch.float64) for _ in range(4))
    mask = torch.tensor([[1, 0, 0, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 0, 0], [0, 0, 0, 0, 1], [0, 0, 0, 0, 0]],
                        dtype=torch.bool)  # rows 1 and 4 see no key
    out, lse = attention_forward(q, k, v, False, mask=mask)
    assert torch.isinf(lse[..., [1, 4]]).all() and torch.isfinite(lse[..., [0, 2, 3]]).all()
    assert_close(out, _softmax_reference(q, k, v, mask))
    dq, dk, dv = attention_backward(do, q, k, v, out, lse, False, mask=mask)
    qr, kr, vr = (x.clone().requires_grad_() for x in (q, k, v))
    _softmax_reference(qr, kr, vr, mask).backward(do)
    for got, want in ((dq, qr.grad), (dk, kr.grad), (dv, vr.grad)):
        assert torch.isfinite(got).all()
        assert_close(got, want)


def test_merge_of_blocks_with_empty_rows_equals_the_whole():
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 4, 3, generator=gen) for _ in range(3))
    k2, v2 = (torch.randn(1, 2, 4, 3, generator=gen) for _ in range(2))
    m1 = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    m2 = torch.tensor([[0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 1]], dtype=torch.bool)
    out = torch.zeros(1, 2, 4, 3)
    lse = torch.full((1, 2, 4), float("-inf"))
    for kk, vv, m in ((k, v, m1), (k2, v2, m2)):
        merge_partials(out, lse, *attention_forward(q, kk, vv, False, mask=m))
    assert torch.isfinite(out).all() and torch.isinf(lse[..., 1]).all()  # row 1 saw nothing in either block
    whole = torch.cat([m1, m2], dim=1)
    want, want_lse = attention_forward(q, torch.cat([k, k2], 2), torch.cat([v, v2], 2), False, mask=whole)
    assert_close(out, want)
    assert_close(lse, want_lse)


def test_masked_kernel_on_cuda_is_a_visible_fallback(monkeypatch):
    """A call with a mask on CUDA (no runtime path makes one since packs run the varlen kernels) runs the masked
    math kernel, warns once and records 'math-masked'."""
    q = torch.randn(1, 1, 2, 2)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(attention, "_WARNED_MASKED", [])
    with attention.kernels_used() as ran, pytest.warns(RuntimeWarning, match="masked math kernel"):
        attention_forward(q, q, q, True, mask=torch.ones(2, 2, dtype=torch.bool))
    assert ran == {"math-masked"}


@pytest.mark.parametrize("causal", [True, False])
def test_reference_pack_equals_each_document_alone(causal):
    """The oracle's meaning: a packed reference forward gives each document the logits it has alone."""
    cfg = ModelSpec(vocab_size=64, max_positions=32, hidden=24, heads=4, layers=2, causal=causal, name="runtime")
    ref = ReferenceGPT(cfg)
    ref.load_state_dict(init_state_dict(cfg, 2))
    pack = pack_sequence([1, 9, 4, 1, 6], 3)  # 21 tokens, each document padded to 6
    ids = torch.randint(0, 64, (2, pack.padded_len), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        packed = ref(ids, cu_seqlens=cu_seqlens(pack))
        for got, doc in zip(documents_of(pack, packed), documents_of(pack, ids)):
            assert_close(got, ref(doc), rtol=1e-5, atol=1e-5)


def test_pack_without_a_target_has_loss_zero_in_reference_and_model():
    """A pack of single-token documents has no next-token target (every label -100): the reference and the
    runtime's model both give loss 0 (the labelled count clamped to 1), not NaN, and zero gradients."""
    from paradyse_lab.runtime.model.parallel_gpt import ParallelGPT

    cfg = ModelSpec(vocab_size=64, max_positions=8, hidden=24, heads=4, layers=1, name="runtime")
    sd = init_state_dict(cfg, 3)
    ref, model = ReferenceGPT(cfg), ParallelGPT(cfg, state_dict=sd)
    ref.load_state_dict(sd)
    pack = pack_sequence([1, 1, 1], 1)
    ids = torch.tensor([[5, 9, 2]])
    labels = pack_labels(pack, ids)
    assert (labels == IGNORE).all()
    for loss in (ref(ids, labels, cu_seqlens=cu_seqlens(pack))[1],
                 model(ids, ["megatron_ts"], labels, cu_seqlens=cu_seqlens(pack))[1]):
        loss.backward()
        assert float(loss.detach()) == 0.0
    assert all(float(g.grad.abs().sum()) == 0.0 for g in (ref.wte, next(model.parameters())))


@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_rank_attention_pairs_one_document_is_balanced_and_pairs_add_up(p):
    one = pack_sequence([24, 48], p)  # multiples of 2p for p = 1..4: no padding
    for causal in (True, False):  # per-document zig-zag balances unpadded documents exactly
        assert len(set(rank_attention_pairs(one, p, causal))) == 1
    pack = pack_sequence([1, 13, 5, 1, 27], p)
    for causal in (True, False):
        pairs = rank_attention_pairs(pack, p, causal)
        mask = block_diagonal_mask(cu_seqlens(pack), causal)  # [s, s]
        rows = [local_positions(pack.padded_len, p, r, cu_seqlens(pack)) for r in range(p)]
        assert pairs == [int(mask[rank_rows].sum()) for rank_rows in rows]  # rank r's rows
