"""The single-device reference model (GPT-2- or LLaMA-shaped) and its parameters, built from a `ModelSpec`.

Library module (no command). GPT-2 (Radford et al. 2019; Hugging Face `GPT2LMHeadModel`): learned
positions, pre-LayerNorm blocks, biases, tanh-GELU ('gelu_new'), tied embedding and head, attention scale
1/sqrt(d). LLaMA (Touvron et al. 2023; Hugging Face `LlamaForCausalLM`), chosen by `ModelSpec` flags:
RMSNorm, no biases, SwiGLU MLP (silu(gate) * up, then down), rotary embeddings (`rope`), grouped-query
attention (`kv_heads` K/V heads, query head i reads K/V head i // (heads / kv_heads)), untied head.
Parameter names are the runtime's (`weight_shards`): `wte`, `wpe`, `lnf_w`, `lnf_b`, `head` (untied only), and
per layer `layers.L.attn.{ln_w, ln_b, w1, b1, w2, b2}` and `layers.L.mlp.{...}` with w1 [n1, h] (out, in;
attention rows q | k | v, SwiGLU rows gate | up), w2 [n2, h] (in, out): `ParallelGPT` holds the same names
with 1/p shards (weight_shards.shard_state_dict).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime.model.packed import block_diagonal_mask, document_of
from paradyse_lab.runtime.model.rope import apply_rope, rope_tables


def check_runnable(cfg: ModelSpec) -> None:
    """What the runtime needs of a model beyond a valid `ModelSpec`: an embedding and a head, positions (learned
    ones, or rotary ones on an even head dimension); a one-line `UserInputError` naming the field otherwise."""
    if not cfg.embedding_and_head:
        raise UserInputError(f"model {cfg.name!r}: the runtime needs an embedding and a head")
    if not isinstance(cfg.max_positions, int) or cfg.max_positions < (0 if cfg.rope else 1):
        raise UserInputError(f"model.max_positions must be a positive integer, got {cfg.max_positions!r}")
    if cfg.rope and cfg.head_dim % 2:
        raise UserInputError(f"rotary embeddings need an even head dimension, got {cfg.head_dim}")


class SubLayerParams(nn.Module):
    """ln_w, ln_b, w1, b1, w2, b2 of one sub-layer; the matrices hold 1/p of their rows. A part the model
    does not have (RMSNorm's bias, LLaMA's linear biases) is an empty tensor, so every strategy takes the
    same six parameters."""

    def __init__(self, h: int, n1: int, n2: int, p: int = 1, norm_bias: bool = True, bias: bool = True,
                 out_bias: bool | None = None):
        super().__init__()
        self.ln_w, self.ln_b = nn.Parameter(torch.ones(h)), nn.Parameter(torch.zeros(h if norm_bias else 0))
        self.w1 = nn.Parameter(torch.zeros(n1 // p, h))
        self.b1 = nn.Parameter(torch.zeros(n1 // p if bias else 0))
        self.w2 = nn.Parameter(torch.zeros(n2 // p, h))
        self.b2 = nn.Parameter(torch.zeros(h if (bias if out_bias is None else out_bias) else 0))


class Block(nn.Module):
    """One transformer layer: an attention and an MLP sub-layer."""

    def __init__(self, cfg: ModelSpec, p: int = 1):
        super().__init__()
        h, nb = cfg.hidden, cfg.norm == "layernorm"
        self.attn = SubLayerParams(h, *cfg.sublayer_shapes("attention"), p, nb, cfg.bias or cfg.qkv_bias, cfg.bias)
        self.mlp = SubLayerParams(h, *cfg.sublayer_shapes("mlp"), p, nb, cfg.bias)


class GPTParams(nn.Module):
    """All parameters (embedding, positions, final norm, head, blocks); shards when p > 1. Learned positions
    `wpe` are [0, h] under rotary embeddings, `lnf_b` [0] under RMSNorm; `head` [V, h] exists only when the
    head is not tied to `wte`. `vocab_parallel`: `wte` and `head` are each rank's [ceil(V/p), h] rows."""

    def __init__(self, cfg: ModelSpec, p: int = 1, vocab_parallel: bool = False):
        super().__init__()
        check_runnable(cfg)
        self.cfg = cfg
        vocab = -(-cfg.vocab_size // p) if vocab_parallel else cfg.vocab_size  # the vocabulary-parallel R
        self.wte = nn.Parameter(torch.zeros(vocab, cfg.hidden))
        self.wpe = nn.Parameter(torch.zeros(0 if cfg.rope else cfg.max_positions, cfg.hidden))
        self.lnf_w = nn.Parameter(torch.ones(cfg.hidden))
        self.lnf_b = nn.Parameter(torch.zeros(cfg.hidden if cfg.norm == "layernorm" else 0))
        if not cfg.tied:
            self.head = nn.Parameter(torch.zeros(vocab, cfg.hidden))
        self.layers = nn.ModuleList(Block(cfg, p) for _ in range(cfg.layers))

    def head_weight(self) -> torch.Tensor:
        """The output head [V, h]: `wte` when tied."""
        return self.wte if self.cfg.tied else self.head


def init_state_dict(cfg: ModelSpec, seed: int = 0) -> dict[str, torch.Tensor]:
    """GPT-2 initialisation of the full model, deterministic in `seed`: N(0, 0.02) matrices (embedding,
    head), N(0, 0.01) positions, output projections scaled by 1/sqrt(2L) (Radford et al. 2019), zero
    biases, unit norms."""
    return dict(init_tensors(cfg, seed))


def init_tensors(cfg: ModelSpec, seed: int = 0):
    """(key, full tensor) of `init_state_dict`, one at a time in its order and with its values: the shapes come
    from the model built on the meta device (no memory), so a caller that keeps only a part of each tensor
    (weight_shards.init_rank_state_dict) never holds the whole model."""
    gen = torch.Generator().manual_seed(seed)
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in GPTParams(cfg).state_dict().items()}
    for key, shape in shapes.items():
        unit = key == "lnf_w" or key.endswith(".ln_w")
        value = torch.ones(shape) if unit else torch.zeros(shape)
        if key in ("wte", "head") or key.endswith(".w1"):
            value.normal_(0.0, 0.02, generator=gen)
        elif key == "wpe":
            value.normal_(0.0, 0.01, generator=gen)
        elif key.endswith(".w2"):
            value.normal_(0.0, 0.02 / math.sqrt(2 * cfg.layers), generator=gen)
        yield key, value


def norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """LayerNorm (bias non-empty) or RMSNorm (empty bias: x / sqrt(mean(x^2) + eps) * weight, as Hugging
    Face's `LlamaRMSNorm`) over the last dimension."""
    if bias.numel():
        return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def add_bias(a: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """a + bias, or a itself when the model has no bias (empty tensor)."""
    return a + bias if bias.numel() else a


def _positions(s: int, cu_seqlens, device) -> torch.Tensor:
    """[s] positions of a sequence, or within each document of a pack."""
    index = torch.arange(s, device=device)
    if cu_seqlens is None:
        return index
    return document_of(cu_seqlens, index)[1]


def _attention(a: torch.Tensor, cfg: ModelSpec, cu_seqlens=None) -> torch.Tensor:
    b, s, _ = a.shape
    h, kv, d = cfg.hidden, cfg.kv_hidden, cfg.head_dim
    q, k, v = a.split([h, kv, kv], dim=-1)
    if cfg.rope:
        cos, sin = rope_tables(_positions(s, cu_seqlens, a.device), d, cfg.rope_theta, a.dtype, cfg.rope_llama3)
        q, k = apply_rope(q, cos, sin, d), apply_rope(k, cos, sin, d)
    q = q.view(b, s, cfg.heads, d).transpose(1, 2)  # [b, heads, s, d]
    k, v = (z.view(b, s, cfg.kv_heads, d).transpose(1, 2).repeat_interleave(cfg.heads // cfg.kv_heads, dim=1)
            for z in (k, v))  # [b, kv_heads, s, d] -> [b, heads, s, d] (query head i reads K/V head i // group)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)  # [b, heads, s, s]
    if cu_seqlens is not None:  # a pack: block-diagonal over its documents
        scores = scores.masked_fill(~block_diagonal_mask(cu_seqlens, cfg.causal).to(a.device), float("-inf"))
    elif cfg.causal:
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool, device=a.device).triu(1), float("-inf"))
    o = torch.softmax(scores, dim=-1) @ v  # [b, heads, s, d]
    return o.transpose(1, 2).reshape(b, s, -1)  # [b, heads, s, d] -> [b, s, h]


def _mlp_core(a: torch.Tensor, cfg: ModelSpec) -> torch.Tensor:
    if cfg.ffn_kind == "swiglu":
        gate, up = a.chunk(2, dim=-1)  # [b, s, 2f] -> 2 x [b, s, f]
        return F.silu(gate) * up
    return F.gelu(a, approximate="tanh")


def reference_sublayer(x: torch.Tensor, w, kind: str, cfg: ModelSpec, cu_seqlens=None) -> torch.Tensor:
    """One full sub-layer in plain autograd: x + core(norm(x) w1^T + b1) w2 + b2; `w` has attributes or
    keys ln_w, ln_b, w1, b1, w2, b2 (full shapes); x [b, s, h] in natural order; `cu_seqlens` [n + 1]: x is
    a pack of documents, attention is block-diagonal over them."""
    get = (lambda n: w[n]) if isinstance(w, dict) else (lambda n: getattr(w, n))
    u = norm(x, get("ln_w"), get("ln_b"), cfg.norm_eps)
    a = add_bias(u @ get("w1").t(), get("b1"))  # [b, s, h] -> [b, s, n1]
    c = _attention(a, cfg, cu_seqlens) if kind == "attention" else _mlp_core(a, cfg)
    return add_bias(x + c @ get("w2"), get("b2"))  # [b, s, n2] -> [b, s, h]


class ReferenceGPT(GPTParams):
    """Single-device GPT-2 / LLaMA-shaped model in plain autograd, the oracle of the runtime tests."""

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None, cu_seqlens=None):
        """input_ids [b, s] -> logits [b, s, V] (and the mean loss over labels != -100, which are the
        per-position targets, already shifted; 0 when no label is a target, as `ParallelGPT`).
        `cu_seqlens`
        [n + 1]: input_ids is a pack of documents: positions restart at each document,
        attention is block-diagonal."""
        cfg = self.cfg
        x = self.wte[input_ids]
        if not cfg.rope:
            x = x + self.wpe[_positions(input_ids.shape[1], cu_seqlens, input_ids.device)]
        for blk in self.layers:
            x = reference_sublayer(x, blk.attn, "attention", cfg, cu_seqlens)
            x = reference_sublayer(x, blk.mlp, "mlp", cfg)
        logits = norm(x, self.lnf_w, self.lnf_b, cfg.norm_eps) @ self.head_weight().t()
        if labels is None:
            return logits
        total = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100,  # [b*s, V]
                                reduction="sum")
        count = (labels != -100).sum().to(torch.float32)
        return logits, total / count.clamp(min=1)  # no target at all (a pack of 1-token documents): 0, as ParallelGPT
