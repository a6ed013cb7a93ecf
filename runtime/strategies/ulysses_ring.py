"""Ulysses x ring (USP): all-to-all over heads inside groups of a ranks, zig-zag ring attention over the
b = p / a groups, ZeRO-3 weights over all p, on the unified layout.

Library module (no command). Fang and Zhao, "USP: A Unified Sequence Parallelism Approach for Long Context
Generative AI" (arXiv 2405.07719): Ulysses' head all-to-all inside, ring attention outside; priced by
`ulysses_ring_work`. The p ranks of the layer's group form a x b: head group j holds the consecutive ranks
j*a .. j*a + a - 1, ring group i the ranks i, a + i, 2a + i, ... (rank r is member r % a of head group r // a and
member r // a of ring group r % a). Why no tokens move between layers: in the unified layout rank r holds chunks
r and 2p-1-r of every (layout) document cut into 2p chunks, so head group j holds chunks j*a .. j*a + a - 1 and
their mirror images, which are chunks j and 2b-1-j of the same document cut into 2b: after its all-to-all a
rank holds exactly ring member j's tokens of a zig-zag ring over b ranks, put in that order by a local
permutation (`ring_order`). Attention on rank r: gather W_qkv, W_proj; q, k, v of all heads for
its t tokens, q and k rotated by their true positions; K/V heads replicated to a when kv_heads < a (the
replicate rule at a, as ulysses_z at p); all-to-all in the head group to h/a heads of the group's a*t
tokens; ring attention over the ring group; the output back by the inverse
permutation and all-to-all; the full output projection. The MLP is zero3.MLP (its weights span all p).
Kept: x, u [b, t, h], the ring's q, k, v, o [b, heads/a, a*t, d] and lse, and the output
again as c [b, t, h] after the all-to-all back (the output projection's input), as ulysses_z keeps.
Where a does not split the heads evenly (the catalog's rule), the head group splits them as ulysses_uneven does
over p (ceil or floor of heads / a per member, the K/V heads each member's query heads read), with the ring in
place of the whole-sequence attention: member i of every head group holds the same heads, so its ring group
attends over them.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache, lru_cache

import torch

from paradyse_lab.core.head_split import splits_evenly
from paradyse_lab.runtime.attention.kernels import merge_heads, split_heads
from paradyse_lab.runtime.attention.ring import ring_attention_backward, ring_attention_forward
from paradyse_lab.runtime.comm.fake_group import FakeGroup, is_fake
from paradyse_lab.runtime.comm.group_timeout import new_subgroups, run_timeout
from paradyse_lab.runtime.model.layout import layout_documents, ring_positions
from paradyse_lab.runtime.model.reference import add_bias
from paradyse_lab.runtime.model.sublayer import (
    Ctx,
    Impl,
    Weights,
    attention_sections,
    rope_qk,
    rope_qk_backward,
    weight_grad,
)
from paradyse_lab.runtime.strategies import zero3
from paradyse_lab.runtime.strategies.flat_shards import join_sections, split_sections
from paradyse_lab.runtime.strategies.ulysses_uneven import Attend, uneven_backward, uneven_forward
from paradyse_lab.runtime.strategies.ulysses_z import _replicate, _sum_replicas, heads_to_seq, seq_to_heads
from paradyse_lab.runtime.strategies.zero3 import prepare_backward, project_in, project_in_backward, scatter_grad

_GROUPS: dict = {}
"""(layer group's ranks, a) -> (head group, ring group) of this rank, made once per process."""
_BLOCKS: set = set()
"""(block size, a) whose head and ring groups `make_block_subgroups` made, on every rank of the world."""


def forget_subgroups() -> None:
    """Drop the made head and ring groups: they belong to the world being left, and a later world makes its own."""
    _GROUPS.clear()
    _BLOCKS.clear()


def _split(ranks: tuple[int, ...], a: int) -> tuple[list[list[int]], list[list[int]]]:
    """(head groups, ring groups) of the a x (p / a) split of `ranks` (module docstring): p/a groups of a
    consecutive ranks, a groups of p/a ranks strided by a."""
    b = len(ranks) // a
    heads = [list(ranks[j * a:(j + 1) * a]) for j in range(b)]
    return heads, [[ranks[j * a + i] for j in range(b)] for i in range(a)]


def make_block_subgroups(size: int, a: int) -> None:
    """Make the head and ring groups of degree a of every aligned block of `size` consecutive ranks of the world
    (a grouped step's layer groups of `size`), on every rank at once and in the same order (`new_subgroups`):
    their names are the world's group count, the same on every rank whatever groups some ranks made alone before.
    Every rank of the world calls it, with the same arguments in the same order; made once per process."""
    import torch.distributed as dist

    world = dist.get_world_size()
    if (size, a) in _BLOCKS or size in (1, world):  # one rank: no subgroups; the world: `subgroups` makes them
        return
    blocks = [tuple(range(start, start + size)) for start in range(0, world, size)]
    splits = [_split(block, a) for block in blocks]
    head = new_subgroups([g for heads, _ in splits for g in heads])  # the world's ranks in groups of a
    ring = new_subgroups([g for _, rings in splits for g in rings])  # ... in groups of size / a
    _GROUPS[(blocks[dist.get_rank() // size], a)] = (head, ring)
    _BLOCKS.add((size, a))


def subgroups(group, p: int, a: int):
    """(head group, ring group) of this rank in the a x (p / a) split of `group` (module docstring), made once per
    process. When `group` spans the world, every rank makes every head and ring group in the same order
    (`new_subgroups`): their names are the world's group count, which no earlier group made by some ranks only
    can put out of step. A grouped step's layer groups, part of the world, have theirs made before the step on
    every rank (`make_block_subgroups`). Any other layer group that is part of the world makes its subgroups by
    its members alone (`use_local_synchronization`), whose hashed names count the groups each member holds: the
    members must have made as many groups before, or they wait for each other under different names."""
    import torch.distributed as dist

    if is_fake(group):  # a traced step: the subgroups are fake too, this rank's member index in each
        return FakeGroup(a, group.rank % a), FakeGroup(p // a, group.rank // a)
    ranks = tuple(range(p)) if group is None or group is dist.group.WORLD else \
        tuple(dist.get_process_group_ranks(group))
    key = (ranks, a)
    if key not in _GROUPS:
        heads, rings = _split(ranks, a)
        if len(ranks) == dist.get_world_size():
            _GROUPS[key] = (new_subgroups(heads), new_subgroups(rings))
        else:
            r = ranks.index(dist.get_rank())
            _GROUPS[key] = tuple(dist.new_group(g, timeout=run_timeout(), use_local_synchronization=True)
                                 for g in (heads[r // a], rings[r % a]))
    return _GROUPS[key]


@lru_cache(maxsize=256)
def _ring_order(documents: tuple[int, ...], p: int, a: int, j: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(order, inverse) of head group j: `gathered[..., order, :]` puts the group's tokens, as the all-to-all
    returns them (member-major: member i's t tokens in its local order), in the order of ring member j's
    tokens in the zig-zag layout over b = p / a ranks; `inverse` undoes it. Both [a*t]."""
    gathered = torch.cat([ring_positions(documents, p, j * a + i) for i in range(a)])  # [a*t] global positions
    target = ring_positions(documents, p // a, j)  # [a*t]: the same positions, in ring order
    index = torch.full((sum(documents),), -1, dtype=torch.long)
    index[gathered] = torch.arange(gathered.numel())
    order = index[target]
    assert (order >= 0).all(), "a head group's tokens are not one ring member's"
    return order, torch.argsort(order)


@lru_cache(maxsize=16)
def _ring_order_on(documents: tuple[int, ...], p: int, a: int, j: int, device: str) -> tuple[torch.Tensor, ...]:
    """`_ring_order` copied to `device` once per layout, not in every forward and backward: on a GPU each such
    copy from pageable host memory is a blocking one, after which the host waits for the stream to drain
    (PyTorch's CUDA copy kernel: `memcpy_and_sync` when not `non_blocking`), and on the meta device of a traced step
    it is an operation a CPU run never issues. Few entries: every sub-layer of a step shares its layout, and each
    holds two [a*t] int64 tensors in device memory."""
    return tuple(z.to(device) for z in _ring_order(documents, p, a, j))


def ring_order(ctx: Ctx, a: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """`_ring_order` of this rank's head group, on `device` (cached there)."""
    documents = layout_documents(ctx.cu_seqlens, ctx.p) or (ctx.seq_len,)
    return _ring_order_on(documents, ctx.p, a, ctx.rank // a, str(device))


def split_ctx(ctx: Ctx, a: int) -> tuple[Ctx, object]:
    """(the head group's Ctx: its group, size a and this rank's member index; the ring group) of this rank in the
    a x (p / a) split of the layer's group."""
    head, ring = subgroups(ctx.group, ctx.p, a) if ctx.p > 1 else (ctx.group, ctx.group)
    return replace(ctx, group=head, p=a, rank=ctx.rank % a), ring


def _ring_attend(ctx: Ctx, a: int, ring, device) -> Attend:
    """Ring attention over the ring group of this rank's heads of its head group's a*t tokens (given in the order
    the all-to-all returns them, put in ring order and back), for the uneven split inside head groups."""
    order, inverse = ring_order(ctx, a, device)

    def forward(q, k, v, heads: int):
        d = q.shape[-1] // heads
        qh, kh, vh = (split_heads(z.index_select(1, order), z.shape[-1] // d).contiguous()
                      for z in (q, k, v))  # [b, a*t, n d] -> [b, n, a*t, d] in ring order
        o, lse = ring_attention_forward(qh, kh, vh, ctx.causal, ring, ctx.cu_seqlens, ctx.p)  # [b, heads, a*t, d]
        return merge_heads(o).index_select(1, inverse), (qh, kh, vh, o, lse)  # -> [b, a*t, heads d]

    def backward(do, saved):
        q, k, v, o, lse = saved
        dor = split_heads(do.index_select(1, order), q.shape[1])  # [b, a*t, heads d] -> [b, heads, a*t, d]
        grads = ring_attention_backward(dor, q, k, v, o, lse, ctx.causal, ring, ctx.cu_seqlens, ctx.p)
        return tuple(merge_heads(g).index_select(1, inverse) for g in grads)  # [b, n, a*t, d] -> [b, a*t, n d]
    return Attend(forward, backward)


def _forward(a: int, x, w: Weights, ctx: Ctx, prep=None):
    hctx, ring = split_ctx(ctx, a)
    if not splits_evenly(ctx.heads, ctx.kv, a):  # ceil or floor of the heads per member (the catalog's rule)
        return uneven_forward(x, w, ctx, prep, hctx, _ring_attend(ctx, a, ring, x.device))
    h = x.shape[-1]
    d, rep = h // ctx.heads, max(1, a // ctx.kv)
    order, inverse = ring_order(ctx, a, x.device)
    (_, _, w2), u, qkv = project_in(x, w, ctx, prep)  # qkv [b, t, h + 2kv] (p rank groups of q | k | v)
    q, k, v = split_sections(qkv, attention_sections(ctx, h, 1), ctx.p)  # [b, t, h], [b, t, kv] x 2
    q, k = rope_qk(q, k, ctx.positions, ctx, h)  # this rank's tokens, rotated by their true positions
    k, v = _replicate(k, d, rep), _replicate(v, d, rep)  # [b, t, kv] -> [b, t, max(kv_heads, a)*d]
    kv_a = k.shape[-1]
    send = join_sections([q, k, v], a)  # [b, t, a*n]: member i's group: its h/a q heads, its kv_a/a K/V heads
    heads = seq_to_heads(send, hctx).index_select(1, order)  # [b, t, a*n] -> [b, a*t, n] (ring order)
    qh, kh, vh = heads.split([h // a, kv_a // a, kv_a // a], dim=-1)  # [b, a*t, h/a], [b, a*t, kv_a/a] x 2
    qh, kh, vh = (split_heads(z, z.shape[-1] // d).contiguous() for z in (qh, kh, vh))  # [b, n, a*t, d]
    o, lse = ring_attention_forward(qh, kh, vh, ctx.causal, ring, ctx.cu_seqlens, ctx.p)  # [b, heads/a, a*t, d]
    c = heads_to_seq(merge_heads(o).index_select(1, inverse), hctx)  # [b, a*t, h/a] -> [b, t, h]
    return add_bias(x + c @ w2, w.b2), (x, u, c, qh, kh, vh, o, lse)


def _backward(a: int, saved, dy, w: Weights, ctx: Ctx, prep):
    hctx, ring = split_ctx(ctx, a)
    if not splits_evenly(ctx.heads, ctx.kv, a):
        return uneven_backward(saved, dy, w, ctx, prep, hctx, _ring_attend(ctx, a, ring, saved[0].device))
    x, u, c, q, k, v, o, lse = saved
    h = x.shape[-1]
    d, rep = h // ctx.heads, max(1, a // ctx.kv)
    order, inverse = ring_order(ctx, a, x.device)
    w2 = prep[2]
    sw2 = scatter_grad(weight_grad(c, dy), ctx, w.w2.dtype)  # [h, h] -> [h/p, h], reduce-scattered at once
    dc = seq_to_heads(dy @ w2.t(), hctx).index_select(1, order)  # [b, t, h] -> [b, a*t, h/a] (ring order)
    do = split_heads(dc, ctx.heads // a)  # [b, a*t, h/a] -> [b, heads/a, a*t, d]
    dq, dk, dv = ring_attention_backward(do, q, k, v, o, lse, ctx.causal, ring, ctx.cu_seqlens, ctx.p)
    dheads = torch.cat([merge_heads(z) for z in (dq, dk, dv)], dim=-1)  # [b, n, a*t, d] x 3 -> [b, a*t, n]
    kv_a = ctx.kv * d * rep
    back = heads_to_seq(dheads.index_select(1, inverse), hctx)  # [b, a*t, n] -> [b, t, a*n]
    dq, dk, dv = split_sections(back, (h, kv_a, kv_a), a)  # [b, t, h], [b, t, kv_a] x 2
    dk, dv = _sum_replicas(dk, d, rep), _sum_replicas(dv, d, rep)  # copies' gradients summed: [b, t, kv]
    dq, dk = rope_qk_backward(dq, dk, ctx.positions, ctx, h)
    da = join_sections([dq, dk, dv], ctx.p)  # [b, t, h + 2kv] in gathered-weight order
    return project_in_backward(x, u, da, sw2, dy, w, ctx, prep)  # [b, t, h + 2kv] -> [b, t, h]


@cache
def for_degree(a: int):
    """The implementation of head degree a (`Strategy.head_degree`): its `ATTENTION`, `MLP` and `TILED_MLP`,
    the attributes the runtime reads from a strategy module."""
    class Degree:
        ATTENTION = Impl(f"ulysses_ring:{a}", lambda *args: _forward(a, *args), lambda *args: _backward(a, *args),
                         prepare_backward)
        MLP = zero3.MLP
        TILED_MLP = zero3.TILED_MLP
    Degree.__name__ = f"ulysses_ring_{a}"
    return Degree
