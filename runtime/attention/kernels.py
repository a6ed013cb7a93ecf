"""Attention kernels that return the log-sum-exp, their backward, and the merge of partial results.

Library module (no command). Tensors are `[b, heads, s, d]`; the log-sum-exp is fp32 `[b, heads, s_q]`.
`causal=True` is the top-left-aligned mask of equal query and key lengths (query i sees keys 0..i), the
only causal block ring attention needs with the zig-zag layout.

Backends, chosen per call by `backend(q)` (a fused backend that raises an error other than out of memory
falls back to the next one, exact math last, with a warning; an out-of-memory error is re-raised and
disables nothing; `kernels_used()` says which kernel ran, and profile rows record it):
- 'flash_attn': the flash-attn package (Dao et al., FlashAttention-2) when installed, CUDA, fp16/bf16;
- 'sdpa_flash': PyTorch's fused flash kernel (`aten._scaled_dot_product_flash_attention`) on CUDA, 16-bit
  (these two and their call conventions);
- 'sdpa_cpu': PyTorch's fused flash kernel for CPU (`aten._scaled_dot_product_flash_attention_for_cpu`),
  every dtype on CPU: it tiles the scores, so no [s, s] buffer, and its backward recomputes them per tile;
- 'math': the exact reference (fp32 scores for 16-bit inputs): CUDA fp32, and the fallback of the fused
  kernels; tests compare every fused kernel against it. It builds the full [g*s, s] score matrix and
  recomputes it in the backward. It is the only kernel that takes a mask (tests; no runtime path passes
  one): on CUDA such calls are recorded as 'math-masked' and warned about once (`MASKED_FALLBACK`).
Packed sequences over a whole sequence (megatron_ts, ulysses_z)
run the varlen kernels with the pack's offsets instead: no [s, s] buffer.
The backward of every backend takes the (possibly merged) output and log-sum-exp, so ring attention can
backpropagate each block with the global softmax normaliser (FlashAttention-2 algorithm 2:
P = exp(S - lse), dS = P * (dP - rowsum(dO * O))).
"""

from __future__ import annotations

import contextlib
import math
import warnings

import torch

from paradyse_lab.runtime.attention import flash as flash_kernels


def kernel_for(device: str, dtype: torch.dtype) -> str:
    """The kernel `attention_forward` uses for a query of `dtype` on a device of type `device` ('cuda', 'cpu'):
    a trace on the meta device asks it for the device it stands for."""
    if device == "cuda" and dtype in (torch.float16, torch.bfloat16):
        return "flash_attn" if flash_kernels._fa is not None else "sdpa_flash"
    return "sdpa_cpu" if device == "cpu" else "math"


def backend(q: torch.Tensor) -> str:
    """Which kernel `attention_forward` uses for `q`."""
    return kernel_for(q.device.type, q.dtype)


def _scale(q: torch.Tensor, scale: float | None) -> float:
    return scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])


# --- exact math kernel ---------------------------------------------------------------------------------

def _up(x: torch.Tensor) -> torch.Tensor:
    """16-bit inputs are computed in fp32; fp32 and fp64 stay as they are."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _grouped(x: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """Grouped-query attention without copying K or V: q-shaped x [b, H, s, d] -> [b, KV, g*s, d] (g = H / KV;
    query head i = KV head i // g, so the g heads of a group are adjacent), the rows of one K/V head's group
    stacked; a view when x is contiguous."""
    b, hh, s, d = x.shape
    return x.reshape(b, kv_heads, hh // kv_heads * s, d)  # [b, H, s, d] -> [b, KV, g*s, d]


def _scores(qg, k, causal, scale, sq, mask=None):
    """Scores of grouped queries qg [b, KV, g*sq, d] against k [b, KV, sk, d]: [b, KV, g*sq, sk]; `mask` [sq, sk]
    (True where allowed: packed documents, causality already in it) replaces `causal`."""
    s = torch.matmul(_up(qg), _up(k).transpose(-1, -2)) * scale  # [b,KV,g*sq,d] x [b,KV,d,sk] -> [b,KV,g*sq,sk]
    if mask is not None:  # row r holds query r % sq of its group
        return s.masked_fill(~mask.repeat(s.shape[-2] // sq, 1), float("-inf"))  # [sq, sk] -> [g*sq, sk]
    if causal:  # row r holds query r % sq of its group: it sees keys 0..r % sq
        rows = torch.arange(s.shape[-2], device=s.device) % sq
        s = s.masked_fill(torch.arange(s.shape[-1], device=s.device) > rows[:, None], float("-inf"))
    return s


def _finite(lse: torch.Tensor) -> torch.Tensor:
    """lse with the rows that see no key (-inf) set to 0, so exp(scores - lse) is 0 there, not NaN."""
    return lse.masked_fill(torch.isinf(lse), 0.0)


def _math_forward(q, k, v, causal, scale, mask=None):
    b, hh, sq, d = q.shape
    s = _scores(_grouped(q, k.shape[1]), k, causal, scale, sq, mask)
    lse = torch.logsumexp(s, dim=-1)  # [b,KV,g*sq,sk] -> [b,KV,g*sq]; -inf where a row sees no key
    prob = torch.exp(s - _finite(lse).unsqueeze(-1))  # [b,KV,g*sq,sk]; rows without keys: 0
    out = torch.matmul(prob, _up(v))  # [b,KV,g*sq,sk] x [b,KV,sk,d] -> [b,KV,g*sq,d]
    return out.view(b, hh, sq, d).to(q.dtype), lse.view(b, hh, sq)  # [b,KV,g*sq,.] -> [b,H,sq,.]


def _math_backward(do, q, k, v, o, lse, causal, scale, mask=None):
    b, hh, sq, d = q.shape
    kv = k.shape[1]
    qg, dog, og = (_grouped(x, kv) for x in (q, do, o))  # [b,H,sq,d] -> [b,KV,g*sq,d]
    prob = torch.exp(_scores(qg, k, causal, scale, sq, mask) - _finite(lse).reshape(b, kv, -1, 1))  # [b,KV,g*sq,sk]
    do32 = _up(dog)
    dv = torch.matmul(prob.transpose(-1, -2), do32)  # [b,KV,sk,g*sq] x [b,KV,g*sq,d] -> [b,KV,sk,d]: group summed
    dp = torch.matmul(do32, _up(v).transpose(-1, -2))  # [b,KV,g*sq,d] x [b,KV,d,sk] -> [b,KV,g*sq,sk]
    delta = (do32 * _up(og)).sum(-1, keepdim=True)  # [b,KV,g*sq,1]
    ds = prob * (dp - delta) * scale
    dq = torch.matmul(ds, _up(k))  # [b,KV,g*sq,sk] x [b,KV,sk,d] -> [b,KV,g*sq,d]
    dk = torch.matmul(ds.transpose(-1, -2), _up(qg))  # [b,KV,sk,g*sq] x [b,KV,g*sq,d] -> [b,KV,sk,d]
    return dq.view(b, hh, sq, d).to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


# --- public API ----------------------------------------------------------------------------------------

_KERNELS = {"flash_attn": (flash_kernels.fa_forward, flash_kernels.fa_backward),
            "sdpa_flash": (flash_kernels.sdpa_forward, flash_kernels.sdpa_backward),
            "sdpa_cpu": (flash_kernels.cpu_forward, flash_kernels.cpu_backward),
            "math": (_math_forward, _math_backward)}
_BROKEN: set[str] = set()
"""Fused backends that raised once with an error other than out-of-memory (an unsupported shape or
version): later calls skip them (with a warning). An out-of-memory error is re-raised and poisons nothing:
it says the inputs were too big, not that the kernel cannot run."""
_USED: list[set[str]] = []


@contextlib.contextmanager
def kernels_used():
    """Collect the names of the kernels that actually ran inside the block (profile rows record them):
    `with kernels_used() as ran: ...; sorted(ran)` gives e.g. ['sdpa_flash']."""
    ran: set[str] = set()
    _USED.append(ran)
    try:
        yield ran
    finally:
        _USED.remove(ran)


def candidates(q: torch.Tensor) -> list[str]:
    """The backends to try for `q`, best first (exact math last)."""
    order = {"flash_attn": ["flash_attn", "sdpa_flash", "math"], "sdpa_flash": ["sdpa_flash", "math"],
             "sdpa_cpu": ["sdpa_cpu", "math"]}
    return order.get(backend(q), ["math"])


def is_oom(err: BaseException) -> bool:
    """Whether `err` is the device running out of memory (torch.OutOfMemoryError, or a library's
    allocation failure surfacing as a RuntimeError)."""
    oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    text = str(err)
    return isinstance(err, oom) or (isinstance(err, RuntimeError) and
                                    ("out of memory" in text or "ALLOC_FAILED" in text))


def run_kernels(which: int, q: torch.Tensor, table: dict, order: list[str], *args):
    """Call `table[name][which](*args)` for the first of `order` that is not broken (module docstring: a
    fused kernel failing other than out of memory is disabled with a warning; the last one re-raises)."""
    names = [k for k in order if k not in _BROKEN] or order[-1:]
    for kind in names:
        try:
            result = table[kind][which](*args)
        except Exception as err:  # noqa: BLE001 - fall back to the next backend, exact math last
            if kind == names[-1] or is_oom(err):
                raise
            _BROKEN.add(kind)
            warnings.warn(f"attention kernel {kind!r} failed ({type(err).__name__}: {err}); using the next "
                          "one for the rest of this process", RuntimeWarning, stacklevel=3)
            continue
        for ran in _USED:
            ran.add(kind)
        return result
    raise AssertionError("unreachable")


def _run(which: int, q: torch.Tensor, *args):
    return run_kernels(which, q, _KERNELS, candidates(q), *args)


MASKED_FALLBACK = ("packed documents on CUDA: attention runs the exact masked math kernel (fp32 scores, "
                   "quadratic memory), not a fused varlen kernel; the step's times are not GPU-kernel speed")
"""Warned once per process, and recorded: `kernels_used` collects 'math-masked' for such calls."""
_WARNED_MASKED: list[bool] = []


def _run_masked(which: int, q: torch.Tensor, *args):
    """The math kernel with a document mask (packed sequences). On CUDA this is the visible fallback of a
    fused varlen kernel (flash-attn's `flash_attn_varlen_func` would take the pack's cu_seqlens; ring
    blocks need arbitrary sub-blocks of it, which it does not take): warned once, recorded."""
    if q.is_cuda and not _WARNED_MASKED:
        _WARNED_MASKED.append(True)
        warnings.warn(MASKED_FALLBACK, RuntimeWarning, stacklevel=3)
    result = _KERNELS["math"][which](*args)
    for ran in _USED:
        ran.add("math-masked" if q.is_cuda else "math")
    return result


def attention_forward(q, k, v, causal: bool, scale: float | None = None, mask: torch.Tensor | None = None):
    """Softmax attention: (out [b,H,sq,d] in q's dtype, lse [b,H,sq] fp32, fp64 for fp64 inputs). k and v
    may have fewer heads than q (grouped-query attention: KV dividing H, query head i reading K/V head
    i // (H / KV)); every backend reads them as they are, no full-heads copy is made (flash-attn and
    PyTorch's flash kernel take fewer K/V heads natively, the math kernel stacks each group's queries).
    `mask` [sq, sk] bool (True: allowed; `paradyse_lab.runtime.model.packed.document_mask`) replaces `causal`;
    a query row that sees no key gets out 0 and lse -inf (and no NaN, forward or backward)."""
    if mask is not None:
        out, lse = _run_masked(0, q, q, k, v, causal, _scale(q, scale), mask)
    else:
        out, lse = _run(0, q, q, k, v, causal, _scale(q, scale))
    return out.to(q.dtype), lse_dtype(lse)


def lse_dtype(lse: torch.Tensor) -> torch.Tensor:
    """lse in fp32, or fp64 when it is fp64 (a dtype test on the host: `torch.promote_types` would dispatch)."""
    return lse if lse.dtype in (torch.float32, torch.float64) else lse.float()


def attention_backward(do, q, k, v, o, lse, causal: bool, scale: float | None = None,
                       mask: torch.Tensor | None = None):
    """(dq, dk, dv) of `attention_forward` given the output `o` and log-sum-exp `lse` to normalise with
    (for a ring block: the merged, global ones) and the same `mask`; dk, dv have k's and v's heads (each
    group's sum)."""
    if mask is not None:
        return _run_masked(1, q, do, q, k, v, o, lse, causal, _scale(q, scale), mask)
    return _run(1, q, do, q, k, v, o, lse, causal, _scale(q, scale))


def merge_partials(out, lse, block_out, block_lse):
    """Numerically stable merge of two softmax-attention results over disjoint key sets (in place on the
    fp32 accumulators `out` [b,H,s,d] and `lse` [b,H,s], which may start at 0 and -inf):
    lse' = log(e^lse + e^lse_b), out' = out e^(lse - lse') + out_b e^(lse_b - lse'). Rows that have seen
    no key yet on either side (both lse -inf, packed documents) stay 0 and -inf. A block row with lse +inf is
    empty too: FlashAttention-2 writes +inf (and out 0) for a row that sees no key of the block."""
    block_lse = block_lse.masked_fill(block_lse == float("inf"), float("-inf"))
    new_lse = torch.logaddexp(lse, block_lse)
    ref = _finite(new_lse)  # exp(-inf - 0) = 0 where both are -inf, instead of exp(nan)
    out.mul_(torch.exp(lse - ref).unsqueeze(-1)).add_(block_out.float() * torch.exp(block_lse - ref).unsqueeze(-1))
    lse.copy_(new_lse)



def merge_seen(out, lse, block_out, block_lse):
    """`merge_partials` where every row has seen a key on both sides (both lse finite: one document's ring
    blocks), in fewer operators: with w = sigmoid(lse_b - lse) = e^lse_b / (e^lse + e^lse_b),
    out' = out + w (out_b - out) (a lerp; ring-flash-attention's `_update_out_and_lse` merges with the same
    sigmoid weight) and lse' = logaddexp(lse, lse_b) written into lse."""
    weight = torch.sigmoid(block_lse - lse)  # [b,H,s]
    out.lerp_(block_out.float(), weight.unsqueeze(-1))  # [b,H,s,d], weight [b,H,s,1]
    torch.logaddexp(lse, block_lse, out=lse)

# --- heads: [b, s, heads*d] <-> [b, heads, s, d] -------------------------------------------------------

def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """[b, s, heads*d] -> [b, heads, s, d]."""
    b, s, _ = x.shape
    return x.view(b, s, heads, -1).transpose(1, 2)  # [b, s, heads*d] -> [b, s, heads, d] -> [b, heads, s, d]


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[b, heads, s, d] -> [b, s, heads*d]."""
    b, hh, s, d = x.shape
    return x.transpose(1, 2).reshape(b, s, hh * d)  # [b, heads, s, d] -> [b, s, heads, d] -> [b, s, heads*d]
