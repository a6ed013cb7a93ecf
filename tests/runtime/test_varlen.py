"""Varlen attention (runtime/attention/varlen.py) on CPU: the exact per-document kernel against the masked reference,
flash-attn's varlen functions through stand-ins with each release's calling convention (2.5, 2.6, 2.7, 2.8:
flash_attn/flash_attn_interface.py `_flash_attn_varlen_forward` / `_backward`, computing with the math
kernel), PyTorch's flash kernel with cumulative lengths through a stand-in of the aten ops, and the CUDA
branch's device, dtype and buffer sizes under fake tensors on a fake CUDA device.

Run: `python -m pytest -q tests/runtime/test_varlen.py`.
"""

from __future__ import annotations

import types
from typing import Optional

import pytest
import torch
from torch.testing import assert_close

from paradyse_lab.runtime.attention import flash as flash_kernels
from paradyse_lab.runtime.attention import kernels as attention
from paradyse_lab.runtime.attention import varlen
from paradyse_lab.runtime.attention.gathered import gathered_attention_backward, gathered_attention_forward
from paradyse_lab.runtime.attention.kernels import (
    _math_backward,
    _math_forward,
    attention_backward,
    attention_forward,
    merge_partials,
)
from paradyse_lab.runtime.attention.varlen import varlen_backward, varlen_forward
from paradyse_lab.runtime.model.packed import block_diagonal_mask, document_mask

SCALE = 0.35


def _inputs(b=2, hh=4, kv=2, sq=11, sk=11, d=4, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    q, do = (torch.randn(b, hh, sq, d, generator=gen, dtype=dtype) for _ in range(2))
    k, v = (torch.randn(b, kv, sk, d, generator=gen, dtype=dtype) for _ in range(2))
    return q, k, v, do


def _mask(cu_q, cu_k, causal):
    """[sq, sk] mask of documents i at cu_q[i].. and cu_k[i].. (the masked reference's)."""
    q_doc = torch.repeat_interleave(torch.arange(len(cu_q) - 1), torch.tensor(cu_q).diff())
    k_doc = torch.repeat_interleave(torch.arange(len(cu_k) - 1), torch.tensor(cu_k).diff())
    q_pos = torch.arange(cu_q[-1]) - torch.tensor(cu_q)[q_doc]
    k_pos = torch.arange(cu_k[-1]) - torch.tensor(cu_k)[k_doc]
    return document_mask(q_doc, q_pos, k_doc, k_pos, causal)


CASES = [((0, 1, 4, 4, 11), (0, 1, 4, 4, 11), True),  # a single-token and an empty document
         ((0, 3, 3, 9), (0, 5, 7, 7), False),  # queries without keys, keys without queries
         ((0, 11), (0, 11), True)]


@pytest.mark.parametrize("cu_q, cu_k, causal", CASES)
def test_math_varlen_equals_the_masked_kernel_with_gqa(cu_q, cu_k, causal):
    q, k, v, do = _inputs(sq=cu_q[-1], sk=cu_k[-1])
    mask = _mask(cu_q, cu_k, causal)
    out, lse = varlen_forward(q, k, v, cu_q, cu_k, causal, SCALE)
    want, want_lse = attention_forward(q, k, v, causal, SCALE, mask=mask)
    assert_close(out, want)
    assert_close(lse, want_lse)
    grads = varlen_backward(do, q, k, v, out, lse, cu_q, cu_k, causal, SCALE)
    for got, ref in zip(grads, attention_backward(do, q, k, v, want, want_lse, causal, SCALE, mask=mask)):
        assert_close(got, ref)


def test_offsets_must_cover_the_call():
    q, k, v, _ = _inputs()
    with pytest.raises(ValueError, match="start at 0"):
        varlen_forward(q, k, v, (0, 10), (0, 11), False)
    with pytest.raises(ValueError, match="equal"):
        varlen_forward(q, k, v, (0, 5, 11), (0, 6, 11), True)


def test_merge_treats_flash_attention_plus_inf_lse_as_an_empty_block():
    """FlashAttention-2 writes lse = +inf and out 0 for a row that sees no key of a block: merging such a
    block leaves the accumulated row as it was (it would become 0 / inf otherwise)."""
    q, k, v, _ = _inputs(b=1, hh=2, kv=2, sq=3, sk=3, dtype=torch.float32)
    out, lse = attention_forward(q, k, v, False)
    acc_out, acc_lse = out.clone().float(), lse.clone()
    merge_partials(acc_out, acc_lse, torch.zeros_like(out), torch.full_like(lse, float("inf")))
    assert_close(acc_out, out.float())
    assert_close(acc_lse, lse)


# --- flash-attn stand-ins ------------------------------------------------------------------------------------

SEEN: dict = {}


def _documents(cu_q, cu_k):
    cq, ck = cu_q.tolist(), cu_k.tolist()
    return [(slice(a, b), slice(c, e)) for a, b, c, e in zip(cq[:-1], cq[1:], ck[:-1], ck[1:])]


def _heads(x):
    return x.transpose(0, 1).unsqueeze(0)  # [n, H, d] -> [1, H, n, d]


def _stub_forward(q, k, v, cu_q, cu_k, max_q, max_k, dropout_p, scale, causal, return_softmax):
    """[total, H, d] in -> (out [total, H, d], lse [H, total] with +inf where a row sees no key), as
    FlashAttention-2's varlen kernel computes them."""
    assert q.dim() == 3 and q.stride(-1) == 1 and cu_q.dtype == cu_k.dtype == torch.int32
    assert dropout_p == 0.0 and return_softmax is False
    assert max_q == int(cu_q.diff().max()) and max_k == int(cu_k.diff().max())
    SEEN["forward"] = {"scale": scale, "causal": causal, "tokens": q.shape[0], "kv_heads": k.shape[1]}
    out = torch.zeros_like(q)
    lse = torch.full((q.shape[1], q.shape[0]), float("inf"), dtype=torch.float32)
    for qs, ks in _documents(cu_q, cu_k):
        if qs.stop > qs.start and ks.stop > ks.start:
            o, l_ = _math_forward(_heads(q[qs]), _heads(k[ks]), _heads(v[ks]), causal, scale)
            out[qs], lse[:, qs] = o[0].transpose(0, 1), l_[0]
    return out, lse


def _stub_backward(dout, q, k, v, out, lse, dq, dk, dv, cu_q, cu_k, dropout_p, scale, causal):
    """Writes dq, dk, dv [total, H, d] in place (every release does)."""
    assert all(x.stride(-1) == 1 for x in (dout, q, k, v, out, dq, dk, dv)) and lse.shape == (q.shape[1], q.shape[0])
    SEEN["backward"] = {"scale": scale, "causal": causal}
    for x in (dq, dk, dv):
        x.fill_(float("nan"))  # rows of documents without keys / queries: left as the kernel found them
    for qs, ks in _documents(cu_q, cu_k):
        for dst, sl in ((dq, qs), (dk, ks), (dv, ks)):
            if qs.stop > qs.start and ks.stop > ks.start:
                dst[sl] = 0
        if qs.stop > qs.start and ks.stop > ks.start:
            grads = _math_backward(_heads(dout[qs]), _heads(q[qs]), _heads(k[ks]), _heads(v[ks]), _heads(out[qs]),
                                   lse[:, qs].unsqueeze(0), causal, scale)
            for dst, sl, g in zip((dq, dk, dv), (qs, ks, ks), grads):
                dst[sl] += g[0].transpose(0, 1)
    return torch.zeros(lse.shape)


def fa25_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                 causal, window_size, alibi_slopes, return_softmax, block_table):
    assert tuple(window_size) == (-1, -1) and alibi_slopes is None and block_table is None
    out, lse = _stub_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                             softmax_scale, causal, return_softmax)
    return out, q, k, v, out, lse, None, torch.zeros(2, dtype=torch.int64)


def fa25_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                  max_seqlen_k, dropout_p, softmax_scale, causal, window_size, alibi_slopes, deterministic,
                  rng_state=None):
    assert tuple(window_size) == (-1, -1) and alibi_slopes is None and deterministic is False
    return _stub_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, dropout_p,
                          softmax_scale, causal)


def fa26_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                 causal, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, return_softmax=False,
                 block_table=None, leftpad_k=None, seqused_k=None):
    assert softcap == 0.0 and leftpad_k is None and seqused_k is None
    return fa25_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                        causal, window_size, alibi_slopes, return_softmax, block_table)


def fa26_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                  max_seqlen_k, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                  rng_state=None):
    assert softcap == 0.0
    return fa25_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                         max_seqlen_k, dropout_p, softmax_scale, causal, window_size, alibi_slopes, deterministic)


T, OT = torch.Tensor, Optional[torch.Tensor]  # noqa: UP045 - custom_op's schema parser reads these names


def _custom_ops(ns: str):

    @torch.library.custom_op(f"{ns}::_flash_attn_varlen_forward", mutates_args=(), device_types="cpu")
    def fwd(q: T, k: T, v: T, cu_seqlens_q: T, cu_seqlens_k: T, max_seqlen_q: int, max_seqlen_k: int,
            dropout_p: float, softmax_scale: float, causal: bool, window_size_left: int = -1,
            window_size_right: int = -1, softcap: float = 0.0, alibi_slopes: OT = None, return_softmax: bool = False,
            block_table: OT = None, leftpad_k: OT = None, seqused_k: OT = None, zero_tensors: bool = False
            ) -> tuple[T, T, T, T]:
        assert (window_size_left, window_size_right, softcap, zero_tensors) == (-1, -1, 0.0, False)
        out, lse = _stub_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                                 softmax_scale, causal, return_softmax)
        return out, lse, torch.empty(0), torch.zeros(2, dtype=torch.int64)

    @torch.library.custom_op(f"{ns}::_flash_attn_varlen_backward", mutates_args=("dq", "dk", "dv"),
                             device_types="cpu")
    def bwd(dout: T, q: T, k: T, v: T, out: T, softmax_lse: T, dq: OT, dk: OT, dv: OT, cu_seqlens_q: T,
            cu_seqlens_k: T, max_seqlen_q: int, max_seqlen_k: int, dropout_p: float, softmax_scale: float,
            causal: bool, window_size_left: int, window_size_right: int, softcap: float, alibi_slopes: OT,
            deterministic: bool, rng_state: OT = None, zero_tensors: bool = False) -> T:
        assert (window_size_left, window_size_right, softcap, deterministic) == (-1, -1, 0.0, False)
        return _stub_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, dropout_p,
                              softmax_scale, causal)

    return fwd, bwd


STUBS = {"2.5": (fa25_forward, fa25_backward), "2.6": (fa26_forward, fa26_backward),
         "2.7": _custom_ops("stubvarlen27"), "2.8": _custom_ops("stubvarlen28")}


def _use_flash_attn(monkeypatch, version):
    fwd, bwd = STUBS[version]
    monkeypatch.setattr(flash_kernels, "_fa", types.SimpleNamespace(_flash_attn_varlen_forward=fwd,
                                                                _flash_attn_varlen_backward=bwd))
    monkeypatch.setattr(attention, "backend", lambda q: "flash_attn")
    monkeypatch.setattr(attention, "_BROKEN", set())


@pytest.mark.parametrize("cu_q, cu_k, causal", CASES[:2])
@pytest.mark.parametrize("version", list(STUBS))
def test_flash_attn_varlen_call_conventions(monkeypatch, version, cu_q, cu_k, causal):
    """Every release's varlen functions run (nothing falls back), with the batch rows laid end to end, GQA's
    K/V heads as they are, and give the exact kernel's result; lse +inf of empty rows comes back as -inf."""
    _use_flash_attn(monkeypatch, version)
    q, k, v, do = _inputs(sq=cu_q[-1], sk=cu_k[-1])
    with attention.kernels_used() as ran:
        out, lse = varlen_forward(q, k, v, cu_q, cu_k, causal, SCALE)
        grads = varlen_backward(do, q, k, v, out, lse, cu_q, cu_k, causal, SCALE)
    assert ran == {"flash_attn_varlen"} and not attention._BROKEN
    assert SEEN["forward"] == {"scale": SCALE, "causal": causal, "tokens": 2 * cu_q[-1], "kv_heads": 2}
    assert SEEN["backward"] == {"scale": SCALE, "causal": causal}
    want, want_lse = varlen._math_varlen_forward(q, k, v, cu_q, cu_k, causal, SCALE)
    assert_close(out, want)
    assert_close(lse, want_lse, check_dtype=False)  # the kernels' lse is fp32
    for got, ref in zip(grads, varlen._math_varlen_backward(do, q, k, v, want, want_lse, cu_q, cu_k, causal, SCALE)):
        assert got.shape == ref.shape
        assert_close(got, ref)


def test_parameter_names_fall_back_to_the_varlen_release_table():
    opaque = lambda *args, **kwargs: None  # noqa: E731 - neither a signature nor a schema
    names = flash_kernels.fa_parameter_names(opaque, varlen.FA_VARLEN_FORWARD_ARGS, "2.6.3")
    assert names[10:12] == ("window_size", "softcap")
    assert flash_kernels.fa_parameter_names(STUBS["2.8"][1], varlen.FA_VARLEN_BACKWARD_ARGS) == \
        varlen.FA_VARLEN_BACKWARD_ARGS["2.7"]


def _gathered_pack(causal, dtype=torch.float32, device="cpu", s=16):
    """A pack of 4 documents in rank-major gathered order for p = 2: q, k, v, dout, order, cu_seqlens."""
    from paradyse_lab.runtime.model.layout import natural_order

    gen = torch.Generator().manual_seed(3)
    heads, kv, d = 4, 2, 4
    make = (lambda n: torch.randn(1, s, n, generator=gen, dtype=dtype)) if device == "cpu" else \
        (lambda n: torch.empty(1, s, n, dtype=dtype, device=device))  # fake tensors have no values
    q, dout = make(heads * d), make(heads * d)
    k, v = make(kv * d), make(kv * d)
    order = natural_order(s, 2) if device == "cpu" else torch.arange(s, device=device)
    cu = (0, 1, 6, 9, s)  # host offsets, as the model keeps them (a tensor made under fake mode has no ints)
    return q, k, v, dout, order, torch.tensor(cu) if device == "cpu" else cu


@pytest.mark.parametrize("causal", [True, False])
def test_gathered_pack_runs_the_varlen_kernel_never_the_masked_one(monkeypatch, causal):
    """megatron_ts / ulysses_z on a pack: flash-attn's varlen stand-in runs forward and backward, the
    masked math kernel is never called, and the result is the masked reference's."""
    q, k, v, dout, order, cu = _gathered_pack(causal)
    want, saved = gathered_attention_forward(q, k, v, 4, order, causal, cu)
    mask = block_diagonal_mask(cu, causal)
    assert_close(saved[3], attention_forward(*saved[:3], causal, mask=mask)[0])
    want_grads = gathered_attention_backward(dout, saved, order, causal, cu)
    _use_flash_attn(monkeypatch, "2.8")
    monkeypatch.setattr(attention, "_run_masked", lambda *a: pytest.fail("the masked kernel ran"))
    with attention.kernels_used() as ran:
        out, saved = gathered_attention_forward(q, k, v, 4, order, causal, cu)
        grads = gathered_attention_backward(dout, saved, order, causal, cu)
    assert ran == {"flash_attn_varlen"}
    assert_close(out, want)
    for got, ref in zip(grads, want_grads):
        assert_close(got, ref)


def test_pytorch_flash_kernel_with_cumulative_lengths(monkeypatch):
    """Without flash-attn: aten._flash_attention_forward / _backward with cum_seq_q / cum_seq_k (their
    schema: positional query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...)."""
    def fwd(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask, *,
            scale=None):
        assert return_debug_mask is False
        out, lse = _stub_forward(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, scale, is_causal,
                                 False)
        return out, lse, torch.zeros(2, dtype=torch.uint64), torch.empty(0), torch.empty(0)

    def bwd(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
            rng_state, unused, *, scale=None):
        grads = [torch.empty_like(x) for x in (query, key, value)]
        _stub_backward(grad_out, query, key, value, out, logsumexp, *grads, cum_seq_q, cum_seq_k, dropout_p, scale,
                       is_causal)
        return tuple(grads)

    monkeypatch.setattr(varlen, "aten_ops", lambda: (fwd, bwd))
    monkeypatch.setattr(attention, "backend", lambda q: "sdpa_flash")
    monkeypatch.setattr(attention, "_BROKEN", set())
    cu_q, cu_k, causal = CASES[0]
    q, k, v, do = _inputs()
    with attention.kernels_used() as ran:
        out, lse = varlen_forward(q, k, v, cu_q, cu_k, causal, SCALE)
        grads = varlen_backward(do, q, k, v, out, lse, cu_q, cu_k, causal, SCALE)
    assert ran == {"sdpa_flash_varlen"}
    want, want_lse = varlen._math_varlen_forward(q, k, v, cu_q, cu_k, causal, SCALE)
    assert_close(out, want)
    for got, ref in zip(grads, varlen._math_varlen_backward(do, q, k, v, want, want_lse, cu_q, cu_k, causal, SCALE)):
        assert_close(got, ref)


def test_cuda_branch_under_fake_tensors_keeps_dtype_device_and_linear_buffers(monkeypatch):
    """The CUDA branch as it runs on a GPU without flash-attn (PyTorch's flash kernel with cumulative
    lengths), on fake bf16 tensors of a fake CUDA device: forward and backward run the fused varlen kernel,
    every tensor made is on the device except the host-built offsets, the gradients keep bf16 and the K/V
    heads of GQA, and no intermediate has s * s elements (the masked kernel's [s, s] mask and [g*s, s]
    scores are gone)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Sizes(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.made = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.made += [x for x in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(x, torch.Tensor)]
            return out

    monkeypatch.setattr(flash_kernels, "_fa", None)
    monkeypatch.setattr(attention, "_BROKEN", set())
    with FakeTensorMode(allow_non_fake_inputs=True):
        q, k, v, dout, order, cu = _gathered_pack(True, torch.bfloat16, "cuda", s=128)
        with attention.kernels_used() as ran, Sizes() as seen:
            out, saved = gathered_attention_forward(q, k, v, 4, order, True, cu)
            grads = gathered_attention_backward(dout, saved, order, True, cu)
    s = q.shape[1]
    assert ran == {"sdpa_flash_varlen"} and not attention._BROKEN
    assert out.dtype == torch.bfloat16 and out.is_cuda and saved[4].dtype == torch.float32
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape] and all(g.dtype == torch.bfloat16 for g in grads)
    host = [x for x in seen.made if x.device.type != "cuda"]
    assert host and all(x.dtype == torch.int32 and x.shape == (len(cu),) for x in host)  # only the offsets, copied
    assert max(x.numel() for x in seen.made) < s * s


def test_ring_blocks_of_a_pack_under_fake_cuda_tensors_run_the_varlen_kernel(monkeypatch):
    """megatron_cz / metp's ring blocks over a pack, as rank 1 of 4, on fake bf16 CUDA tensors with GQA:
    every block that is not skipped is one fused varlen call (no mask) forward and backward, over all of the
    rank's queries and the received keys, and keeps dtype, device and K/V heads. (The ring loop itself
    merges in place, and copy_ between fake CUDA tensors raises on a CPU-only build of torch: the loop is
    checked on CPU by the distributed harness.)"""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from paradyse_lab.runtime.attention.ring import _block_backward, _block_forward, _blocks
    from paradyse_lab.runtime.model.packed import cu_seqlens, pack_sequence

    p, rank = 4, 1
    pack = pack_sequence([1, 100, 37, 150], p)
    cu = tuple(cu_seqlens(pack).tolist())  # host offsets, as the model keeps them
    t = pack.padded_len // p
    blocks = _blocks(cu, rank, p, True)  # host work, cached: the blocks' offsets
    assert blocks[0][2] is True and all(b == "skip" or b[2] is False for b in blocks[1:])
    monkeypatch.setattr(flash_kernels, "_fa", None)
    monkeypatch.setattr(attention, "_BROKEN", set())
    with FakeTensorMode(allow_non_fake_inputs=True):
        # [b, t, n, d] viewed as [b, n, t, d], as split_heads gives them (copy_ between fake CUDA tensors raises)
        q, do = (torch.empty(1, t, 4, 8, dtype=torch.bfloat16, device="cuda").transpose(1, 2) for _ in range(2))
        k, v = (torch.empty(1, t, 2, 8, dtype=torch.bfloat16, device="cuda").transpose(1, 2) for _ in range(2))
        lse = torch.empty(1, 4, t, dtype=torch.float32, device="cuda")
        with attention.kernels_used() as ran:
            done = [(_block_forward(q, k, v, rank, (rank - i) % p, t, True, block),
                     _block_backward(do, q, k, v, q, lse, rank, (rank - i) % p, t, True, block))
                    for i, block in enumerate(blocks)]
    assert ran == {"sdpa_flash_varlen"} and not attention._BROKEN
    for block, (fwd, bwd) in zip(blocks, done):
        assert (fwd is None) == (bwd is None) == (block == "skip")
        if fwd is not None:
            assert fwd[1].shape == q.shape and fwd[1].dtype == torch.bfloat16 and fwd[1].is_cuda
            assert fwd[2].shape == (1, 4, t) and fwd[2].dtype == torch.float32
            assert [g.shape for g in bwd[2:]] == [q.shape, k.shape, v.shape]
            assert all(g.dtype == torch.bfloat16 and g.is_cuda for g in bwd[2:])
