"""The torch-native implementations a user would pick instead of ours, for one LLaMA block (used by peer_benchmark.py).

Library module of examples/peer_benchmark.py (no command). A block is RMSNorm, q/k/v projections, rotary
embeddings (the Hugging Face convention: x cos + rotate_half(x) sin), grouped-query causal attention through
`torch.nn.functional.scaled_dot_product_attention` (PyTorch's fused CPU kernel), the output projection and a
residual; then RMSNorm, SwiGLU (w2(silu(w1 x) * w3 x)) and a residual. Module and parameter names follow
torchtitan's Llama (`attention.wq`, `feed_forward.w1`, ...), so its tensor-parallel plan applies by name.
- `plain_block`: the block in plain torch on one process (the p = 1 peer, and in fp64 the reference);
- `tensor_parallel`: torch tensor parallel with torchtitan's Llama plan (torchtitan
  models/llama3/infra/parallelize.py `apply_tp`): SequenceParallel norms, the attention and feed-forward
  inputs redistributed from Shard(1) to Replicate, column-parallel wq/wk/wv/w1/w3, row-parallel wo/w2 with
  Shard(1) outputs (Megatron TP + SP);
- `fsdp_ulysses`: FSDP2 (`fully_shard`) on the attention, the feed-forward and the block, and DeepSpeed-Ulysses
  attention (Jacobs et al. 2023: all-to-all from sequence shards to head shards and back) written with
  `torch.distributed.nn.functional.all_to_all_single`. gloo has no PREMUL_SUM nor AVG, so the gradients are
  summed (`set_gradient_divide_factor(1.0)`, `set_force_sum_reduction_for_comms(True)`);
- `fsdp_ring`: FSDP2 the same way, and causal ring attention (`RingAttention`: K/V passed around the ring with
  torch's P2P, blocks of PyTorch's fused CPU kernel merged by their log-sum-exp). torch's own
  `context_parallel` (torch.distributed.tensor.experimental) has no sharding rule for the CPU attention
  operator, so it does not run on CPU as shipped.
The parallel peers hold contiguous sequence shards (rank r: tokens r t .. (r + 1) t - 1).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) [t, d] of the rotary angles of `positions` [t] (fp32, then `dtype`, as Hugging Face does)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)  # [d/2]
    angles = positions.float()[:, None] * inv_freq[None, :]  # [t, 1] x [1, d/2] -> [t, d/2]
    emb = torch.cat([angles, angles], dim=-1)  # [t, d]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [b, t, n, d] rotated by (cos, sin) [t, d]."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos[:, None] + torch.cat([-x2, x1], dim=-1) * sin[:, None]


class Attention(nn.Module):
    """Grouped-query causal attention; with `ulysses` it turns sequence shards into head shards and back, with
    `ring` it runs ring attention over the sequence shards."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, group=None, ulysses: bool = False,
                 ring: bool = False):
        super().__init__()
        self.head_dim = hidden // heads
        self.wq = nn.Linear(hidden, hidden, bias=False)
        self.wk = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(hidden, hidden, bias=False)
        self.group, self.ulysses, self.ring = group, ulysses, ring

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        d = self.head_dim
        q, k, v = (w(x).view(b, t, -1, d) for w in (self.wq, self.wk, self.wv))  # [b, t, h] -> [b, t, n, d]
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if self.ring:
            o = RingAttention.apply(*(z.transpose(1, 2) for z in (q, k, v)), self.group)  # [b, n, t, d]
            return self.wo(o.transpose(1, 2).reshape(b, t, -1))  # [b, n, t, d] -> [b, t, h] -> [b, t, h]
        if self.ulysses:
            q, k, v = (_seq_to_heads(z, self.group) for z in (q, k, v))  # [b, t, n, d] -> [b, s, n/p, d]
        o = F.scaled_dot_product_attention(*(z.transpose(1, 2) for z in (q, k, v)), is_causal=True,
                                           enable_gqa=True)  # [b, n, s, d]
        o = o.transpose(1, 2)  # [b, n, s, d] -> [b, s, n, d]
        if self.ulysses:
            o = _heads_to_seq(o, self.group)  # [b, s, n/p, d] -> [b, t, n, d]
        return self.wo(o.reshape(b, o.shape[1], -1))  # [b, s, n, d] -> [b, s, h] -> [b, s, h]


def _all_to_all(send: torch.Tensor, group) -> torch.Tensor:
    """Even all-to-all over dim 0 with autograd (torch's functional collectives): [p, ...] -> [p, ...]."""
    from torch.distributed._functional_collectives import all_to_all_single_autograd, wait_tensor

    return wait_tensor(all_to_all_single_autograd(send, None, None, group or dist.group.WORLD))


def _seq_to_heads(x: torch.Tensor, group) -> torch.Tensor:
    """All-to-all [b, t, n, d] (contiguous sequence shard) -> [b, p t, n / p, d] (head shard, natural order)."""
    p = dist.get_world_size(group)
    b, t, n, d = x.shape
    send = x.reshape(b, t, p, n // p, d).permute(2, 0, 1, 3, 4).contiguous()  # [p, b, t, n/p, d]
    recv = _all_to_all(send, group)  # [p (source rank), b, t, n/p, d]
    return recv.permute(1, 0, 2, 3, 4).reshape(b, p * t, n // p, d)  # [b, s, n/p, d]


def _heads_to_seq(x: torch.Tensor, group) -> torch.Tensor:
    """All-to-all [b, p t, n / p, d] -> [b, t, n, d] (the inverse of `_seq_to_heads`)."""
    p = dist.get_world_size(group)
    b, s, m, d = x.shape
    send = x.reshape(b, p, s // p, m, d).transpose(0, 1).contiguous()  # [p (destination), b, t, n/p, d]
    recv = _all_to_all(send, group)  # [p (head group), b, t, n/p, d]
    return recv.permute(1, 2, 0, 3, 4).reshape(b, s // p, p * m, d)  # [b, t, n, d]


def _ring_pass(tensors: list[torch.Tensor], group):
    """Start sending each tensor to the next rank of the ring and receiving the previous rank's (torch's P2P):
    (the received tensors, a function that waits for them)."""
    p, r = dist.get_world_size(group), dist.get_rank(group)
    nxt, prv = [dist.get_global_rank(group or dist.group.WORLD, (r + k) % p) for k in (1, -1)]
    got = [torch.empty_like(x) for x in tensors]
    ops = [dist.P2POp(dist.isend, x, nxt, group) for x in tensors] + \
          [dist.P2POp(dist.irecv, y, prv, group) for y in got]
    reqs = dist.batch_isend_irecv(ops)
    return got, lambda: [req.wait() for req in reqs]


class RingAttention(torch.autograd.Function):
    """Causal ring attention over contiguous sequence shards (Liu et al., "Ring Attention with Blockwise
    Transformers", 2023): rank r's queries q [b, H, t, d] meet the K/V [b, KV, t, d] of ranks r, r - 1, ..., passed
    around the ring; blocks of later ranks are skipped (causal), the partial results merged by their log-sum-exp
    (FlashAttention-2). Each block is PyTorch's fused CPU kernel (`_scaled_dot_product_flash_attention_for_cpu`,
    which returns the log-sum-exp); the backward passes K/V around again with their gradients travelling beside
    them (ring-flash-attention's scheme), each block's gradient from the merged output and log-sum-exp."""

    @staticmethod
    def forward(ctx, q, k, v, group):
        p, r = dist.get_world_size(group), dist.get_rank(group)
        scale = 1.0 / q.shape[-1] ** 0.5
        out = lse = None
        kv = kv_own = [k.contiguous(), v.contiguous()]  # [b, KV, t, d] each, sent as they are
        for i in range(p):
            src = (r - i) % p
            nxt, wait = _ring_pass(kv, group) if i < p - 1 else (None, None)  # overlapped with this block
            if src <= r:
                o_b, lse_b = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                    q, kv[0], kv[1], 0.0, src == r, scale=scale)[:2]  # [b, H, t, d], [b, H, t]
                if out is None:
                    out, lse = o_b.float(), lse_b.float()
                else:
                    new = torch.logaddexp(lse, lse_b)
                    out = out * torch.exp(lse - new).unsqueeze(-1) + o_b * torch.exp(lse_b - new).unsqueeze(-1)
                    lse = new
            if nxt is not None:
                wait()
                kv = nxt
        out = out.to(q.dtype)
        ctx.save_for_backward(q, kv_own[0], kv_own[1], out, lse)
        ctx.group, ctx.scale = group, scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        group, scale = ctx.group, ctx.scale
        p, r = dist.get_world_size(group), dist.get_rank(group)
        dout = dout.contiguous()
        dq = torch.zeros(q.shape, dtype=torch.float32)
        kv = [k, v]
        dkv = [torch.zeros(k.shape, dtype=torch.float32), torch.zeros(v.shape, dtype=torch.float32)]
        for i in range(p):
            src = (r - i) % p
            if src <= r:
                dq_b, dk_b, dv_b = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                    dout, q, kv[0], kv[1], out, lse, 0.0, src == r, scale=scale)[:3]
                dq += dq_b
                dkv[0] += dk_b
                dkv[1] += dv_b
            moved, wait = _ring_pass(kv + dkv if i < p - 1 else dkv, group)  # K/V onward, their gradients too
            wait()
            kv, dkv = (moved[:2], moved[2:]) if i < p - 1 else (kv, moved)
        return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype), None


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.w1 = nn.Linear(hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)
        self.w3 = nn.Linear(hidden, ffn, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    """One LLaMA block (module docstring)."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, ffn: int, eps: float, group=None,
                 ulysses: bool = False, ring: bool = False):
        super().__init__()
        self.attention_norm = nn.RMSNorm(hidden, eps=eps)
        self.attention = Attention(hidden, heads, kv_heads, group, ulysses, ring)
        self.ffn_norm = nn.RMSNorm(hidden, eps=eps)
        self.feed_forward = FeedForward(hidden, ffn)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


def load_runtime_weights(block: Block, attn: dict, mlp: dict) -> Block:
    """Copy the runtime's full sub-layer parameters (w1 rows q | k | v and gate | up, [out, in]; w2 [in, out])
    into the block's torchtitan-named ones."""
    h, kv = block.attention.wq.weight.shape[0], block.attention.wk.weight.shape[0]
    f = block.feed_forward.w1.weight.shape[0]
    with torch.no_grad():
        block.attention_norm.weight.copy_(attn["ln_w"])
        for w, rows in ((block.attention.wq, attn["w1"][:h]), (block.attention.wk, attn["w1"][h:h + kv]),
                        (block.attention.wv, attn["w1"][h + kv:]), (block.attention.wo, attn["w2"].t()),
                        (block.feed_forward.w1, mlp["w1"][:f]), (block.feed_forward.w3, mlp["w1"][f:]),
                        (block.feed_forward.w2, mlp["w2"].t())):
            w.weight.copy_(rows)
        block.ffn_norm.weight.copy_(mlp["ln_w"])
    return block


def plain_block(cfg, attn: dict, mlp: dict, dtype=torch.float32) -> Block:
    """The block on one process."""
    block = Block(cfg.hidden, cfg.heads, cfg.kv_heads, cfg.ffn_hidden, cfg.norm_eps)
    return load_runtime_weights(block, attn, mlp).to(dtype)


def tensor_parallel(cfg, attn: dict, mlp: dict, group) -> Block:
    """torch tensor parallel + sequence parallel with torchtitan's Llama plan (module docstring)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cpu", (dist.get_world_size(group),))
    block = plain_block(cfg, attn, mlp)
    plan = {"attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1), None, None),
                                            desired_input_layouts=(Replicate(), None, None)),
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1))}
    block = parallelize_module(block, mesh, plan)
    block.mesh = mesh
    return block


def fsdp_ulysses(cfg, attn: dict, mlp: dict, group) -> Block:
    """FSDP2 (ZeRO-3 weights) + Ulysses attention (module docstring)."""
    return _fsdp(Block(cfg.hidden, cfg.heads, cfg.kv_heads, cfg.ffn_hidden, cfg.norm_eps, group, ulysses=True),
                 attn, mlp, group)


def fsdp_ring(cfg, attn: dict, mlp: dict, group) -> Block:
    """FSDP2 (ZeRO-3 weights) + ring attention over contiguous sequence shards (module docstring)."""
    return _fsdp(Block(cfg.hidden, cfg.heads, cfg.kv_heads, cfg.ffn_hidden, cfg.norm_eps, group, ring=True),
                 attn, mlp, group)


def _fsdp(block: Block, attn: dict, mlp: dict, group) -> Block:
    """`block` with the runtime's weights, under FSDP2 on the attention, the feed-forward and the whole."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(group),))
    block = load_runtime_weights(block, attn, mlp)
    for module in (block.attention, block.feed_forward, block):
        fully_shard(module, mesh=mesh)
        module.set_gradient_divide_factor(1.0)
        module.set_force_sum_reduction_for_comms(True)
    return block
