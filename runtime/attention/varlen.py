"""Variable-length attention: the queries and keys of several documents in one call, each attending only to
its own document (packed sequences, and the ring blocks of a pack).

Library module (no command). A call is q [b, H, sq, d], k, v [b, KV, sk, d] (KV dividing H: grouped-query
attention, read as they are) and two host offset lists `cu_q`, `cu_k` of n + 1 ints: document i is queries
cu_q[i]..cu_q[i+1] against keys cu_k[i]..cu_k[i+1] (either may be empty). `causal` needs each document's query
and key counts equal (query j sees keys 0..j of its document). Returns (out [b, H, sq, d] in q's dtype, lse
[b, H, sq] fp32, fp64 for fp64 inputs); a query that sees no key gets out 0 and lse -inf, never NaN.
The same `cu_q`, `cu_k` hold for every row of the batch.

Kernels, chosen as the whole-sequence kernels are (`backend(q)`: a fused kernel that raises an error other
than out-of-memory falls back to the next, with a warning; `kernels_used` records the one that ran):
- 'flash_attn_varlen': flash-attn's `_flash_attn_varlen_forward` / `_backward` (Dao, FlashAttention-2; the
  call conventions of releases 2.5 to 2.8, `FA_VARLEN_FORWARD_ARGS`), the batch rows laid end to end as
  [b*s, H, d] with the offsets repeated per row ("cu_seqlens_q: (batch_size + 1,), dtype torch.int32. The
  cumulative sequence lengths of the sequences in the batch": flash-attn's docstring);
- 'sdpa_flash_varlen': PyTorch's own flash kernel with cumulative lengths
  (`aten._flash_attention_forward` / `_flash_attention_backward` with cum_seq_q / cum_seq_k: the op under
  `torch.nn.attention.varlen.varlen_attn`, called directly so the backward takes a merged lse);
- 'sdpa_cpu_varlen': PyTorch's fused CPU flash kernel (`cpu_forward`) once per
  document (it takes no cumulative lengths), no mask (CPU);
- 'math_varlen': the exact math kernel once per document, no mask (CUDA fp32, the fallback, the tests'
  reference).
None of them builds a [s, s] tensor: the fused kernels tile, the math kernel holds one document's
[n_i, n_i] scores at a time. FlashAttention-2 writes lse = +inf for a row that sees no key (an empty
document's queries); it is returned as -inf here, the convention the merge of ring partials reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import torch
from torch._subclasses.fake_tensor import FakeTensor

from paradyse_lab.runtime.attention import flash as flash_kernels
from paradyse_lab.runtime.attention import kernels as attention
from paradyse_lab.runtime.attention.flash import call_positional
from paradyse_lab.runtime.attention.kernels import _math_backward, _math_forward, _scale

FA_VARLEN_FORWARD_ARGS = {
    "2.5": ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "dropout_p",
            "softmax_scale", "causal", "window_size", "alibi_slopes", "return_softmax", "block_table"),
    "2.6": ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "dropout_p",
            "softmax_scale", "causal", "window_size", "softcap", "alibi_slopes", "return_softmax", "block_table",
            "leftpad_k", "seqused_k"),
    "2.7": ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "dropout_p",
            "softmax_scale", "causal", "window_size_left", "window_size_right", "softcap", "alibi_slopes",
            "return_softmax", "block_table", "leftpad_k", "seqused_k", "zero_tensors"),
}
"""Parameters of flash-attn's `_flash_attn_varlen_forward` by release (flash_attn/flash_attn_interface.py of
2.5, 2.6, 2.7; 2.8 keeps 2.7's). 2.5 and 2.6 return (out, q, k, v, out_padded, softmax_lse, S_dmask,
rng_state), 2.7+ (out, softmax_lse, S_dmask, rng_state); softmax_lse is [H, total_q]. Read from the
function's signature or custom-op schema first (`flash_kernels.fa_parameter_names`); the table is the fallback."""
FA_VARLEN_BACKWARD_ARGS = {
    "2.5": ("dout", "q", "k", "v", "out", "softmax_lse", "dq", "dk", "dv", "cu_seqlens_q", "cu_seqlens_k",
            "max_seqlen_q", "max_seqlen_k", "dropout_p", "softmax_scale", "causal", "window_size", "alibi_slopes",
            "deterministic", "rng_state"),
    "2.6": ("dout", "q", "k", "v", "out", "softmax_lse", "dq", "dk", "dv", "cu_seqlens_q", "cu_seqlens_k",
            "max_seqlen_q", "max_seqlen_k", "dropout_p", "softmax_scale", "causal", "window_size", "softcap",
            "alibi_slopes", "deterministic", "rng_state"),
    "2.7": ("dout", "q", "k", "v", "out", "softmax_lse", "dq", "dk", "dv", "cu_seqlens_q", "cu_seqlens_k",
            "max_seqlen_q", "max_seqlen_k", "dropout_p", "softmax_scale", "causal", "window_size_left",
            "window_size_right", "softcap", "alibi_slopes", "deterministic", "rng_state", "zero_tensors"),
}
"""Parameters of `_flash_attn_varlen_backward` (writes dq, dk, dv in place in every release)."""

_FA_DEFAULTS = dict(dropout_p=0.0, window_size=(-1, -1), window_size_left=-1, window_size_right=-1, softcap=0.0,
                    alibi_slopes=None, return_softmax=False, block_table=None, leftpad_k=None, seqused_k=None,
                    zero_tensors=False, deterministic=False, rng_state=None)


def host_offsets(cu_seqlens) -> tuple[int, ...]:
    """A pack's offsets as host ints (no device sync when given a CPU tensor or a tuple, as the model keeps
    them)."""
    if isinstance(cu_seqlens, tuple):
        return cu_seqlens
    return tuple(int(x) for x in torch.as_tensor(cu_seqlens).tolist())


def check_offsets(cu_q: Sequence[int], cu_k: Sequence[int], sq: int, sk: int, causal: bool) -> None:
    """Raise ValueError unless `cu_q`, `cu_k` cover sq queries and sk keys in the same number of documents,
    non-decreasing, with equal counts per document when causal."""
    if len(cu_q) != len(cu_k) or len(cu_q) < 2 or cu_q[0] or cu_k[0] or cu_q[-1] != sq or cu_k[-1] != sk:
        raise ValueError(f"offsets {list(cu_q)[:6]}.. / {list(cu_k)[:6]}.. must start at 0 and end at {sq} / {sk}")
    nq, nk = _lengths(cu_q), _lengths(cu_k)
    if min(nq + nk) < 0 or (causal and nq != nk):
        raise ValueError("document lengths must be >= 0, and equal for queries and keys when causal")


def _lengths(cu: Sequence[int]) -> list[int]:
    return [b - a for a, b in zip(cu[:-1], cu[1:])]


@lru_cache(maxsize=256)
def _batched_offsets(cu: tuple[int, ...], b: int, device: str) -> torch.Tensor:
    """[b*n + 1] int32 offsets of b batch rows laid end to end (row i's documents shifted by i * cu[-1]),
    on `device`; cached, so a step copies each pack's offsets to the GPU once per layout."""
    shifted = [a + i * cu[-1] for i in range(b) for a in cu[:-1]] + [b * cu[-1]]
    return torch.tensor(shifted, dtype=torch.int32).to(device)


def _tokens_major(x: torch.Tensor) -> torch.Tensor:
    """[b, H, s, d] -> [b*s, H, d] (a view when x is a transposed [b, s, H, d] tensor, as split_heads makes)."""
    b, hh, s, d = x.shape
    return x.transpose(1, 2).reshape(b * s, hh, d)  # [b, H, s, d] -> [b, s, H, d] -> [b*s, H, d]


def _heads_major(x: torch.Tensor, b: int) -> torch.Tensor:
    """[b*s, H, d] -> [b, H, s, d] (a view)."""
    return x.view(b, -1, *x.shape[1:]).transpose(1, 2)  # [b*s, H, d] -> [b, s, H, d] -> [b, H, s, d]


def _lse_from_kernel(lse: torch.Tensor, b: int) -> torch.Tensor:
    """The kernels' [H, b*s] lse -> [b, H, s], +inf (no key) as -inf."""
    lse = lse.view(lse.shape[0], b, -1).permute(1, 0, 2)  # [H, b*s] -> [H, b, s] -> [b, H, s]
    return lse.masked_fill(lse == float("inf"), float("-inf"))


def _lse_to_kernel(lse: torch.Tensor) -> torch.Tensor:
    """[b, H, s] -> [H, b*s] contiguous fp32 (the kernels' layout)."""
    return lse.float().permute(1, 0, 2).reshape(lse.shape[1], -1)  # [b, H, s] -> [H, b, s] -> [H, b*s]


def _flat_call(q, k, cu_q, cu_k):
    """The arguments every fused kernel takes: offsets on q's device and the longest documents (fake
    tensors, tests of the CUDA branches on CPU, build them uncached)."""
    b, dev = q.shape[0], str(q.device)
    build = _batched_offsets.__wrapped__ if isinstance(q, FakeTensor) else _batched_offsets
    return build(tuple(cu_q), b, dev), build(tuple(cu_k), b, dev), max(_lengths(cu_q)), max(_lengths(cu_k))


# --- flash-attn -----------------------------------------------------------------------------------------

def _fa_varlen_forward(q, k, v, cu_q, cu_k, causal, scale):
    cuq, cuk, mq, mk = _flat_call(q, k, cu_q, cu_k)
    res = call_positional(flash_kernels._fa._flash_attn_varlen_forward, FA_VARLEN_FORWARD_ARGS, dict(
        _FA_DEFAULTS, q=_tokens_major(q), k=_tokens_major(k), v=_tokens_major(v), cu_seqlens_q=cuq,
        cu_seqlens_k=cuk, max_seqlen_q=mq, max_seqlen_k=mk, softmax_scale=scale, causal=causal))
    out, lse = (res[0], res[5]) if len(res) == 8 else (res[0], res[1])  # 2.5/2.6: 8 values; 2.7+: 4
    return _heads_major(out, q.shape[0]), _lse_from_kernel(lse, q.shape[0])


def _clear_unpaired(grads, cu_q, cu_k):
    """Zero dq of the queries of documents without keys and dk, dv of the keys of documents without
    queries (a ring block's left-out tokens: whether a fused kernel writes those rows is not part of its
    contract); no-op when every document has both."""
    lq, lk = _lengths(cu_q), _lengths(cu_k)
    for a, nq, c, nk in zip(cu_q[:-1], lq, cu_k[:-1], lk):
        if nq and not nk:
            grads[0].narrow(2, a, nq).zero_()
        if nk and not nq:
            grads[1].narrow(2, c, nk).zero_()
            grads[2].narrow(2, c, nk).zero_()
    return grads


def _fa_varlen_backward(do, q, k, v, o, lse, cu_q, cu_k, causal, scale):
    cuq, cuk, mq, mk = _flat_call(q, k, cu_q, cu_k)
    grads = [torch.empty_like(_tokens_major(x), memory_format=torch.contiguous_format) for x in (q, k, v)]
    call_positional(flash_kernels._fa._flash_attn_varlen_backward, FA_VARLEN_BACKWARD_ARGS, dict(
        _FA_DEFAULTS, dout=_tokens_major(do), q=_tokens_major(q), k=_tokens_major(k), v=_tokens_major(v),
        out=_tokens_major(o), softmax_lse=_lse_to_kernel(lse), dq=grads[0], dk=grads[1], dv=grads[2],
        cu_seqlens_q=cuq, cu_seqlens_k=cuk, max_seqlen_q=mq, max_seqlen_k=mk, softmax_scale=scale, causal=causal))
    return _clear_unpaired(tuple(_heads_major(g, q.shape[0]) for g in grads), cu_q, cu_k)  # -> [b, n, s, d]


# --- PyTorch's flash kernel -----------------------------------------------------------------------------

def aten_ops():
    """(forward, backward) of PyTorch's flash kernel with cumulative lengths (tests replace them on CPU)."""
    return torch.ops.aten._flash_attention_forward, torch.ops.aten._flash_attention_backward


def _sdpa_varlen_forward(q, k, v, cu_q, cu_k, causal, scale):
    cuq, cuk, mq, mk = _flat_call(q, k, cu_q, cu_k)
    flat = [_tokens_major(x).contiguous() for x in (q, k, v)]  # [b*s, n, d]
    res = aten_ops()[0](*flat, cuq, cuk, mq, mk, 0.0, causal, False, scale=scale)
    return _heads_major(res[0], q.shape[0]), _lse_from_kernel(res[1], q.shape[0])  # out, lse [H, b*s]


def _sdpa_varlen_backward(do, q, k, v, o, lse, cu_q, cu_k, causal, scale):
    cuq, cuk, mq, mk = _flat_call(q, k, cu_q, cu_k)
    flat = [_tokens_major(x).contiguous() for x in (do, q, k, v, o)]  # [b*s, n, d]
    # dropout 0: the rng state is never read (torch.nn.attention.varlen passes zeros and an empty tensor)
    rng, unused = torch.zeros(2, dtype=torch.uint64, device=q.device), torch.empty(0, device=q.device)
    grads = aten_ops()[1](*flat, _lse_to_kernel(lse), cuq, cuk, mq, mk, 0.0, causal, rng, unused, scale=scale)
    return _clear_unpaired(tuple(_heads_major(g, q.shape[0]) for g in grads), cu_q, cu_k)  # -> [b, n, s, d]


# --- exact math kernel, one document at a time ------------------------------------------------------------

def _documents(cu_q, cu_k):
    """(query slice, key slice) of every document with queries and keys."""
    return [(slice(a, b), slice(c, e)) for a, b, c, e in zip(cu_q[:-1], cu_q[1:], cu_k[:-1], cu_k[1:])
            if b > a and e > c]


def _per_document_forward(kernel, q, k, v, cu_q, cu_k, causal, scale):
    """`kernel` (a whole-sequence forward of `kernels`) once per document with queries and keys."""
    b, hh, sq, d = q.shape
    out = torch.zeros(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.full((b, hh, sq), float("-inf"), dtype=attention._up(q).dtype, device=q.device)
    for qs, ks in _documents(cu_q, cu_k):
        out[:, :, qs], lse[:, :, qs] = kernel(q[:, :, qs], k[:, :, ks], v[:, :, ks], causal, scale)
    return out, lse


def _per_document_backward(kernel, do, q, k, v, o, lse, cu_q, cu_k, causal, scale):
    """`kernel` (a whole-sequence backward) once per document; a document's keys belong to it alone, so its
    dk, dv are written, not added."""
    dq, dk, dv = (torch.zeros_like(x) for x in (q, k, v))
    for qs, ks in _documents(cu_q, cu_k):
        dq[:, :, qs], dk[:, :, ks], dv[:, :, ks] = kernel(do[:, :, qs], q[:, :, qs], k[:, :, ks], v[:, :, ks],
                                                          o[:, :, qs], lse[:, :, qs], causal, scale)
    return dq, dk, dv


def _math_varlen_forward(q, k, v, cu_q, cu_k, causal, scale):
    return _per_document_forward(_math_forward, q, k, v, cu_q, cu_k, causal, scale)


def _math_varlen_backward(do, q, k, v, o, lse, cu_q, cu_k, causal, scale):
    return _per_document_backward(_math_backward, do, q, k, v, o, lse, cu_q, cu_k, causal, scale)


def _cpu_varlen_forward(q, k, v, cu_q, cu_k, causal, scale):
    return _per_document_forward(flash_kernels.cpu_forward, q, k, v, cu_q, cu_k, causal, scale)


def _cpu_varlen_backward(do, q, k, v, o, lse, cu_q, cu_k, causal, scale):
    return _per_document_backward(flash_kernels.cpu_backward, do, q, k, v, o, lse, cu_q, cu_k, causal, scale)


KERNELS = {"flash_attn": ("flash_attn_varlen", _fa_varlen_forward, _fa_varlen_backward),
           "sdpa_flash": ("sdpa_flash_varlen", _sdpa_varlen_forward, _sdpa_varlen_backward),
           "sdpa_cpu": ("sdpa_cpu_varlen", _cpu_varlen_forward, _cpu_varlen_backward),
           "math": ("math_varlen", _math_varlen_forward, _math_varlen_backward)}
"""Backend (attention.backend) -> (recorded name, forward, backward)."""


def varlen_forward(q, k, v, cu_q: Sequence[int], cu_k: Sequence[int], causal: bool, scale: float | None = None):
    """(out [b, H, sq, d], lse [b, H, sq]) of the documents at `cu_q` / `cu_k` (module docstring)."""
    check_offsets(cu_q, cu_k, q.shape[2], k.shape[2], causal)
    table = {name: (fwd, bwd) for name, fwd, bwd in KERNELS.values()}
    out, lse = attention.run_kernels(0, q, table, [KERNELS[c][0] for c in attention.candidates(q)],
                                     q, k, v, cu_q, cu_k, causal, _scale(q, scale))
    return out.to(q.dtype), attention.lse_dtype(lse)


def varlen_backward(do, q, k, v, o, lse, cu_q: Sequence[int], cu_k: Sequence[int], causal: bool,
                    scale: float | None = None):
    """(dq, dk, dv) of `varlen_forward` given the output and lse to normalise with (a ring block: the merged
    ones); dk, dv have k's and v's heads."""
    table = {name: (fwd, bwd) for name, fwd, bwd in KERNELS.values()}
    return attention.run_kernels(1, q, table, [KERNELS[c][0] for c in attention.candidates(q)],
                                 do, q, k, v, o, lse, cu_q, cu_k, causal, _scale(q, scale))
