"""One operation of a traced training step, as plain data (no torch): what the pricing needs of it.

Kinds (`KINDS`):
- `gemm`: a matrix product [batch x] (m x k) @ (k x n) in `dtype`;
- `attention`: one call of the runtime's attention (forward or backward, `which`): query / key lengths, query
  and key/value heads, head dimension, causality and the kernel the runtime chose (`kernel`); the kernel's
  own inner operators are folded into it;
- `elementwise`: any other operator that launches work: `nbytes` read plus written;
- `host`: an operator with no device work (a view, an allocation): it costs only its dispatch;
- `collective`: all_gather / reduce_scatter / all_to_all / all_reduce of a `nbytes` buffer (nccl-tests' S:
  the input) over `group` ranks; the operators of the group's implementation are folded into it;
- `p2p`: one exchange (sends and receives posted together) of `nbytes` sent, started asynchronously; its
  `wait` (kind `wait`, same `ref`) is where the device stream needs the received block;
- `host_copy`: a copy between the device and host memory of `nbytes`.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("gemm", "attention", "elementwise", "host", "collective", "p2p", "wait", "host_copy")


@dataclass(frozen=True)
class Op:
    """One operation one rank issues (module docstring)."""

    kind: str
    name: str
    """The aten operator, or the collective / attention entry point."""
    dtype: str = ""
    m: int = 0
    n: int = 0
    k: int = 0
    batch: int = 1
    """gemm: batched products; attention: the batch b."""
    nbytes: int = 0
    group: int = 0
    """Collectives and p2p: ranks in the group."""
    sq: int = 0
    sk: int = 0
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    causal: bool = False
    kernel: str = ""
    which: str = ""
    """attention: 'forward' or 'backward'."""
    ref: int = 0
    """p2p and its wait: the exchange's number in the trace."""
    pairs: int = 0
    """attention: query-key pairs per head and batch row when the call is a varlen call over documents (the sum
    of each document's sq x sk); 0: the dense call's sq x sk."""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown op kind {self.kind!r}; valid: {', '.join(KINDS)}")

    @property
    def flops(self) -> float:
        """Multiply-adds x 2 of a gemm; of an attention call, its two products (x 2.5 for the backward:
        FlashAttention-2's count, five products where the forward has two), halved when causal and square."""
        if self.kind == "gemm":
            return 2.0 * self.batch * self.m * self.n * self.k
        if self.kind == "attention":
            f = 4.0 * self.batch * self.heads * self.key_pairs * self.head_dim
            f *= 2.5 if self.which == "backward" else 1.0
            return f / 2 if self.causal and self.sq == self.sk else f
        return 0.0

    @property
    def key_pairs(self) -> int:
        """attention: the query-key pairs of one head and batch row (`pairs`, else sq x sk)."""
        return self.pairs or self.sq * self.sk


def counts(ops) -> dict[str, int]:
    """Operations per kind."""
    out: dict[str, int] = {}
    for op in ops:
        out[op.kind] = out.get(op.kind, 0) + 1
    return out
