"""The fused attention kernels: flash-attn's and PyTorch's flash kernel on CUDA, PyTorch's fused flash kernel
on CPU, in the calling conventions of `kernels` (which chooses among them and falls back to its
exact math kernel).

Library module (no command). Tensors are `[b, heads, s, d]`; the log-sum-exp is fp32 `[b, heads, s_q]`.
- 'flash_attn' (`fa_forward`, `fa_backward`): the flash-attn package (Dao et al., FlashAttention-2) when
  installed (`_fa`, None otherwise), CUDA, fp16/bf16; the call conventions of releases 2.5 to 2.8
  (`FA_FORWARD_ARGS`), q, k, v, o, dO passed as strided [b, s, H, d] views of the [b, H, s, d] tensors
  (flash-attn needs only stride(-1) == 1: no copies); the varlen kernels call its varlen internals the same
  way (`call_positional`);
- 'sdpa_flash' (`sdpa_forward`, `sdpa_backward`): PyTorch's fused flash kernel
  (`aten._scaled_dot_product_flash_attention`) on CUDA, 16-bit;
- 'sdpa_cpu' (`cpu_forward`, `cpu_backward`): PyTorch's fused flash kernel for CPU
  (`aten._scaled_dot_product_flash_attention_for_cpu` and its `_backward`, the kernel under
  `torch.nn.functional.scaled_dot_product_attention` on CPU), every floating dtype; it tiles the scores (no
  [s, s] buffer), reads fewer K/V heads than query heads natively (grouped-query attention: dK, dV come back
  with K's and V's heads) and returns the log-sum-exp [b, H, s] in fp32 (fp64 for fp64 inputs).
All backwards take the (possibly merged) output and log-sum-exp, as the whole-sequence kernels' do: they
recompute P = exp(S - lse) from the lse they are given.
"""

from __future__ import annotations

import inspect

import torch

try:  # optional GPU dependency
    from flash_attn import flash_attn_interface as _fa  # type: ignore
except Exception:  # noqa: BLE001 - any import failure means "not available"
    _fa = None


FA_FORWARD_ARGS = {
    "2.5": ("q", "k", "v", "dropout_p", "softmax_scale", "causal", "window_size", "alibi_slopes",
            "return_softmax"),
    "2.6": ("q", "k", "v", "dropout_p", "softmax_scale", "causal", "window_size", "softcap", "alibi_slopes",
            "return_softmax"),
    "2.7": ("q", "k", "v", "dropout_p", "softmax_scale", "causal", "window_size_left", "window_size_right",
            "softcap", "alibi_slopes", "return_softmax"),
}
"""Positional parameters of flash-attn's `_flash_attn_forward` by release (flash_attn/flash_attn_interface.py of
flash-attn 2.5, 2.6 and 2.7; 2.8 keeps 2.7's parameters and renames the op namespace to `flash_attn::`).
2.5 and 2.6 return (out, q, k, v, out_padded, softmax_lse, S_dmask, rng_state); 2.7 and later are
`torch.library.custom_op` objects (signature `(*args, **kwargs)`) returning (out, softmax_lse, S_dmask,
rng_state)."""
FA_BACKWARD_ARGS = {
    "2.5": ("dout", "q", "k", "v", "out", "softmax_lse", "dq", "dk", "dv", "dropout_p", "softmax_scale", "causal",
            "window_size", "alibi_slopes", "deterministic", "rng_state"),
    "2.6": ("dout", "q", "k", "v", "out", "softmax_lse", "dq", "dk", "dv", "dropout_p", "softmax_scale", "causal",
            "window_size", "softcap", "alibi_slopes", "deterministic", "rng_state"),
    "2.7": ("dout", "q", "k", "v", "out", "softmax_lse", "dq", "dk", "dv", "dropout_p", "softmax_scale", "causal",
            "window_size_left", "window_size_right", "softcap", "alibi_slopes", "deterministic", "rng_state"),
}
"""Positional parameters of `_flash_attn_backward` (writes dq, dk, dv in place in every release)."""


def fa_parameter_names(fn, table: dict, version: str | None = None) -> tuple[str, ...]:
    """The parameter names of a flash-attn internal: its Python signature (2.5, 2.6); the schema of a
    `torch.library.custom_op` (2.7+, whose Python signature is `(*args, **kwargs)`); else the table row of
    the installed release (`flash_attn.__version__`)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        params = ()
    names = tuple(q.name for q in params if q.kind in (q.POSITIONAL_ONLY, q.POSITIONAL_OR_KEYWORD))
    if names:
        return names
    schema = getattr(getattr(fn, "_opoverload", None), "_schema", None) or getattr(fn, "_schema", None)
    if schema is not None:
        return tuple(a.name for a in schema.arguments)
    major_minor = ".".join(str(version or _fa_version()).split(".")[:2])
    return table.get(major_minor) or table["2.7"]


def _fa_version() -> str:
    try:
        import flash_attn  # type: ignore

        return str(flash_attn.__version__)
    except Exception:  # noqa: BLE001 - version unknown: the newest call convention
        return "2.7"


def call_positional(fn, table: dict, values: dict):
    """Call `fn` with `values` placed positionally by its parameter names (every name must be known)."""
    names = fa_parameter_names(fn, table)
    missing = [n for n in names if n not in values]
    if missing:
        raise TypeError(f"{getattr(fn, '__name__', fn)}: unknown flash-attn parameters {missing}")
    return fn(*(values[n] for n in names))


def fa_forward(q, k, v, causal, scale):
    # [b,H,s,d] -> [b,s,H,d] as strided views, no copy: flash-attn needs only stride(-1) == 1
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    res = call_positional(_fa._flash_attn_forward, FA_FORWARD_ARGS, dict(
        q=qt, k=kt, v=vt, dropout_p=0.0, softmax_scale=scale, causal=causal, window_size=(-1, -1),
        window_size_left=-1, window_size_right=-1, softcap=0.0, alibi_slopes=None, return_softmax=False))
    out, lse = (res[0], res[5]) if len(res) == 8 else (res[0], res[1])  # 2.5/2.6: 8 values; 2.7+: 4
    return out.transpose(1, 2), lse  # [b,s,H,d] -> [b,H,s,d]


def fa_backward(do, q, k, v, o, lse, causal, scale):
    # [b,H,s,d] -> [b,s,H,d] as strided views, no copy (stride(-1) == 1 is all flash-attn needs)
    qt, kt, vt, ot, dot = (x.transpose(1, 2) for x in (q, k, v, o, do))
    # gradients allocated [b,H,s,d]-contiguous and viewed as [b,s,H,d]: the returned views are contiguous
    dq, dk, dv = (torch.empty_like(x, memory_format=torch.contiguous_format).transpose(1, 2) for x in (q, k, v))
    call_positional(_fa._flash_attn_backward, FA_BACKWARD_ARGS, dict(
        dout=dot, q=qt, k=kt, v=vt, out=ot, softmax_lse=lse.contiguous(), dq=dq, dk=dk, dv=dv, dropout_p=0.0,
        softmax_scale=scale, causal=causal, window_size=(-1, -1), window_size_left=-1, window_size_right=-1,
        softcap=0.0, alibi_slopes=None, deterministic=False, rng_state=None))
    return tuple(x.transpose(1, 2) for x in (dq, dk, dv))  # [b,s,H,d] -> [b,H,s,d]


def sdpa_forward(q, k, v, causal, scale):
    q, k, v = (x.contiguous() for x in (q, k, v))
    res = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
    return res[0], res[1]  # out [b,H,s,d], lse [b,H,s]


def sdpa_backward(do, q, k, v, o, lse, causal, scale):
    q, k, v, o = (x.contiguous() for x in (q, k, v, o))
    sq, sk = q.shape[2], k.shape[2]
    zero = torch.zeros((), dtype=torch.int64, device=q.device)
    # philox seed / offset are unused with dropout 0; their dtype/device vary across versions.
    res = torch.ops.aten._scaled_dot_product_flash_attention_backward(
        do.contiguous(), q, k, v, o, lse.contiguous(), None, None, sq, sk, 0.0, causal, zero, zero, scale=scale)
    return res[0], res[1], res[2]


def cpu_forward(q, k, v, causal, scale):
    # strided [b,H,s,d] views (split_heads' transposes) are read as they are: no copy
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)
    return out, lse  # out [b,H,s,d], lse [b,H,s]


def cpu_backward(do, q, k, v, o, lse, causal, scale):
    res = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        do, q, k, v, o, lse.contiguous(), 0.0, causal, scale=scale)
    return res[0], res[1], res[2]  # dq [b,H,s,d], dk, dv [b,KV,s,d]
