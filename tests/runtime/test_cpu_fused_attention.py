"""PyTorch's fused CPU attention kernel ('sdpa_cpu') against the exact math kernel, which stays the reference.

Run: `python -m pytest -q tests/runtime/test_cpu_fused_attention.py`. Every case runs the runtime's entry point
twice, once as the runtime chooses on CPU (the fused kernel, checked by `kernels_used`) and once with the
backend forced to 'math', and asserts the outputs, log-sum-exps and gradients equal: the whole sequence, the
zig-zag ring blocks of every rank merged by log-sum-exp and backpropagated with the merged normaliser, the
gathered (rank-major) whole sequence, and packed documents (varlen, ring blocks of a pack with documents
that have no keys or no queries), causal and not, grouped-query attention, fp32 and bf16.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from paradyse_lab.runtime.attention import kernels as attention
from paradyse_lab.runtime.attention import varlen
from paradyse_lab.runtime.attention.gathered import gathered_attention_backward, gathered_attention_forward
from paradyse_lab.runtime.attention.kernels import attention_backward, attention_forward, merge_partials
from paradyse_lab.runtime.attention.ring import _block_backward, _block_forward, _blocks
from paradyse_lab.runtime.attention.varlen import varlen_backward, varlen_forward
from paradyse_lab.runtime.model.layout import local_positions, natural_order

DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


def _qkvd(s, dtype, b=2, heads=4, kv=2, d=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, do = (torch.randn(b, heads, s, d, generator=gen).to(dtype) for _ in range(2))
    k, v = (torch.randn(b, kv, s, d, generator=gen).to(dtype) for _ in range(2))
    return q, k, v, do


def _both(monkeypatch, fn):
    """(fused result, math result) of `fn()`: the first as the runtime picks on CPU, asserted to have run
    the fused kernel only; the second with the backend forced to the math kernel."""
    with attention.kernels_used() as ran:
        fused = fn()
    assert ran and all(name.startswith("sdpa_cpu") for name in ran), ran
    with monkeypatch.context() as m:
        m.setattr(attention, "backend", lambda q: "math")
        with attention.kernels_used() as ran:
            exact = fn()
        assert ran and all(name.startswith("math") for name in ran), ran
    return fused, exact


def _close(got, want, dtype):
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        assert_close(g.float(), w.float(), **TOL[dtype])


def test_cpu_backend_is_the_fused_kernel_then_math():
    q = torch.zeros(1, 2, 4, 8)
    assert attention.backend(q) == "sdpa_cpu" and attention.candidates(q) == ["sdpa_cpu", "math"]
    assert attention.backend(q.bfloat16()) == "sdpa_cpu"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kv", [4, 2, 1])
def test_whole_sequence(monkeypatch, dtype, causal, kv):
    q, k, v, do = _qkvd(24, dtype, kv=kv)

    def run():
        out, lse = attention_forward(q, k, v, causal)
        return (out, lse, *attention_backward(do, q, k, v, out, lse, causal))

    fused, exact = _both(monkeypatch, run)
    assert fused[3].shape == k.shape  # dK with K's heads: no full-heads copy comes back
    _close(fused, exact, dtype)


def _ring(q, k, v, do, p, causal, cu=None):
    """Every rank's zig-zag ring attention in one process: (out, lse, dq, dk, dv) in natural order, from the
    ring's own block kernels and merge (rank r's queries against the K/V of every src, merged by
    log-sum-exp; the backward of every block with the merged out and lse, dK/dV summed at the owner)."""
    s = q.shape[2]
    t = s // p
    pos = [local_positions(s, p, r, cu) for r in range(p)]
    out, lse, dq, dk, dv = (torch.zeros_like(x, dtype=torch.float32) for x in (q, q[..., 0], q, k, v))
    for r in range(p):
        ql, dol = q[:, :, pos[r]], do[:, :, pos[r]]
        o_r = torch.zeros(ql.shape, dtype=torch.float32)
        l_r = torch.full(ql.shape[:3], float("-inf"))
        blocks = _blocks(cu, r, p, causal)
        for i in range(p):
            src = (r - i) % p
            done = _block_forward(ql, k[:, :, pos[src]], v[:, :, pos[src]], r, src, t, causal, blocks[i])
            if done is not None:
                merge_partials(o_r[:, :, done[0]], l_r[:, :, done[0]], done[1], done[2])
        o_r = o_r.to(q.dtype)
        for i in range(p):
            src = (r - i) % p
            done = _block_backward(dol, ql, k[:, :, pos[src]], v[:, :, pos[src]], o_r, l_r, r, src, t, causal,
                                   blocks[i])
            if done is not None:
                qs, ks, dq_b, dk_b, dv_b = done
                dq[:, :, pos[r][qs]] += dq_b.float()
                dk[:, :, pos[src][ks]] += dk_b.float()
                dv[:, :, pos[src][ks]] += dv_b.float()
        out[:, :, pos[r]], lse[:, :, pos[r]] = o_r.float(), l_r
    return out, lse, dq, dk, dv


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("p", [2, 3])
def test_ring_blocks_merged_by_lse(monkeypatch, dtype, causal, p):
    q, k, v, do = _qkvd(4 * p * 3, dtype)
    fused, exact = _both(monkeypatch, lambda: _ring(q, k, v, do, p, causal))
    _close(fused, exact, dtype)
    out, lse = attention_forward(q, k, v, causal)  # the ring equals one kernel over the whole sequence
    assert_close(fused[0], out.float(), **TOL[dtype])
    assert_close(fused[1], lse, **TOL[dtype])


PACKS = [(0, 8, 12, 24), (0, 4, 20, 24)]
"""Segment offsets of 24-token packs, every segment a multiple of 2p for p = 2 (the per-document zig-zag)."""


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("cu", PACKS)
def test_ring_blocks_of_a_pack(monkeypatch, dtype, causal, cu):
    q, k, v, do = _qkvd(cu[-1], dtype)
    fused, exact = _both(monkeypatch, lambda: _ring(q, k, v, do, 2, causal, cu))
    _close(fused, exact, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cu_q, cu_k, causal", [((0, 1, 4, 4, 11), (0, 1, 4, 4, 11), True),
                                                ((0, 3, 3, 9), (0, 5, 7, 7), False),
                                                ((0, 11), (0, 11), True)])
def test_varlen_documents_with_and_without_keys(monkeypatch, dtype, cu_q, cu_k, causal):
    gen = torch.Generator().manual_seed(1)
    q, do = (torch.randn(2, 4, cu_q[-1], 8, generator=gen).to(dtype) for _ in range(2))
    k, v = (torch.randn(2, 2, cu_k[-1], 8, generator=gen).to(dtype) for _ in range(2))

    def run():
        out, lse = varlen_forward(q, k, v, cu_q, cu_k, causal)
        return (out, lse, *varlen_backward(do, q, k, v, out, lse, cu_q, cu_k, causal))

    fused, exact = _both(monkeypatch, run)
    _close(fused, exact, dtype)
    assert not any(torch.isnan(x).any() for x in fused)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("cu", [None, torch.tensor(PACKS[0])])
def test_gathered_whole_sequence(monkeypatch, dtype, causal, cu):
    s, p, heads, kv, d = 24, 2, 4, 2, 8
    gen = torch.Generator().manual_seed(2)
    q, dout = (torch.randn(2, s, heads * d, generator=gen).to(dtype) for _ in range(2))
    k, v = (torch.randn(2, s, kv * d, generator=gen).to(dtype) for _ in range(2))
    order = natural_order(s, p, cu)

    def run():
        out, saved = gathered_attention_forward(q, k, v, heads, order, causal, cu)
        return (out, *gathered_attention_backward(dout, saved, order, causal, cu))

    fused, exact = _both(monkeypatch, run)
    _close(fused, exact, dtype)


def test_a_failing_fused_cpu_kernel_falls_back_to_math(monkeypatch):
    """The fused CPU kernel is one more fused backend: an error other than out of memory disables it for
    the process, with a warning, and the math kernel gives the result."""
    def broken(*args):
        raise RuntimeError("unsupported")

    monkeypatch.setattr(attention, "_BROKEN", set())
    monkeypatch.setitem(attention._KERNELS, "sdpa_cpu", (broken, broken))
    q, k, v, _ = _qkvd(8, torch.float32)
    with pytest.warns(RuntimeWarning, match="sdpa_cpu"), attention.kernels_used() as ran:
        out, lse = attention_forward(q, k, v, True)
    assert ran == {"math"} and attention._BROKEN == {"sdpa_cpu"}
    want, want_lse = attention._math_forward(q, k, v, True, 8 ** -0.5)
    assert_close(out, want)
    assert varlen.KERNELS["sdpa_cpu"][0] == "sdpa_cpu_varlen"
