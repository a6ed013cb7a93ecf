"""The single-device GPT-2 reference model, its config, and Hugging Face state-dict conversion.

Library module (no command). GPT-2 (Radford et al. 2019; Hugging Face `GPT2LMHeadModel`): learned
positions, pre-LayerNorm blocks, biases, tanh-GELU ('gelu_new'), tied embedding and head, attention scale
1/sqrt(d). Parameter names are the runtime's (layout.py): `wte`, `wpe`, `lnf_w`, `lnf_b`, and per layer
`layers.L.attn.{ln_w, ln_b, w1, b1, w2, b2}` and `layers.L.mlp.{...}` with w1 [n1, h] (out, in),
w2 [n2, h] (in, out): `ParallelGPT` holds the same names with 1/p shards (layout.shard_state_dict).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from paradyse_lab.errors import UserInputError
from paradyse_lab.model_spec import ModelSpec


@dataclass(frozen=True)
class GPTConfig:
    """Shapes of a GPT-2 model."""

    vocab_size: int
    """Tokens of the tied embedding / head."""
    max_positions: int
    """Learned positions."""
    hidden: int
    """h."""
    heads: int
    """Attention heads."""
    layers: int
    """Transformer blocks."""
    ffn_hidden: int = 0
    """MLP inner size f; 0 means 4h."""
    causal: bool = True
    """Causal (GPT-2) or bidirectional attention."""
    eps: float = 1e-5
    """LayerNorm epsilon."""

    def __post_init__(self):
        if self.ffn_hidden == 0:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        for name in ("vocab_size", "max_positions", "hidden", "heads", "layers", "ffn_hidden"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise UserInputError(f"GPTConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden % self.heads:
            raise UserInputError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads})")

    @classmethod
    def from_hf(cls, config) -> GPTConfig:
        """From a Hugging Face GPT-2 config (a dict or a `GPT2Config`)."""
        cfg = config if isinstance(config, dict) else config.to_dict()
        act = cfg.get("activation_function", "gelu_new")
        if act not in ("gelu_new", "gelu_pytorch_tanh"):
            raise UserInputError(f"activation_function {act!r} is not supported; the runtime uses tanh-GELU")
        return cls(vocab_size=int(cfg["vocab_size"]), max_positions=int(cfg["n_positions"]),
                   hidden=int(cfg["n_embd"]), heads=int(cfg["n_head"]), layers=int(cfg["n_layer"]),
                   ffn_hidden=int(cfg.get("n_inner") or 0), eps=float(cfg.get("layer_norm_epsilon", 1e-5)))

    @classmethod
    def from_model_spec(cls, spec: ModelSpec) -> GPTConfig:
        """From a `ModelSpec` of GPT-2 shape (LayerNorm, GELU, biases, learned positions, MHA)."""
        if spec.ffn_kind != "gelu" or spec.norm != "layernorm" or not spec.bias or spec.kv_heads != spec.heads:
            raise UserInputError(f"model {spec.name!r}: the runtime runs GPT-2-shaped models only "
                                 "(LayerNorm, GELU MLP, biases, no grouped-query attention)")
        if not spec.embedding_and_head or spec.max_positions == 0:
            raise UserInputError(f"model {spec.name!r}: the runtime needs an embedding and learned positions")
        return cls(vocab_size=spec.vocab_size, max_positions=spec.max_positions, hidden=spec.hidden,
                   heads=spec.heads, layers=spec.layers, ffn_hidden=spec.ffn_hidden, causal=spec.causal)

    def model_spec(self, dtype: str = "fp32") -> ModelSpec:
        """The `ModelSpec` of these shapes (for the cost model and the strategy catalog's checks)."""
        return ModelSpec(name="runtime", hidden=self.hidden, heads=self.heads, layers=self.layers,
                         ffn_hidden=self.ffn_hidden, vocab_size=self.vocab_size, max_positions=self.max_positions,
                         dtype=dtype, causal=self.causal)


class SubLayerParams(nn.Module):
    """ln_w, ln_b, w1, b1, w2, b2 of one sub-layer; the matrices hold 1/p of their rows."""

    def __init__(self, h: int, n1: int, n2: int, p: int = 1):
        super().__init__()
        self.ln_w, self.ln_b = nn.Parameter(torch.ones(h)), nn.Parameter(torch.zeros(h))
        self.w1 = nn.Parameter(torch.zeros(n1 // p, h))
        self.b1 = nn.Parameter(torch.zeros(n1 // p))
        self.w2 = nn.Parameter(torch.zeros(n2 // p, h))
        self.b2 = nn.Parameter(torch.zeros(h))


class Block(nn.Module):
    """One transformer layer: an attention and an MLP sub-layer."""

    def __init__(self, cfg: GPTConfig, p: int = 1):
        super().__init__()
        h = cfg.hidden
        self.attn = SubLayerParams(h, 3 * h, h, p)
        self.mlp = SubLayerParams(h, cfg.ffn_hidden, cfg.ffn_hidden, p)


class GPTParams(nn.Module):
    """All parameters (embedding, positions, final norm, blocks); shards when p > 1."""

    def __init__(self, cfg: GPTConfig, p: int = 1):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Parameter(torch.zeros(cfg.vocab_size, cfg.hidden))
        self.wpe = nn.Parameter(torch.zeros(cfg.max_positions, cfg.hidden))
        self.lnf_w, self.lnf_b = nn.Parameter(torch.ones(cfg.hidden)), nn.Parameter(torch.zeros(cfg.hidden))
        self.layers = nn.ModuleList(Block(cfg, p) for _ in range(cfg.layers))


def init_state_dict(cfg: GPTConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    """GPT-2 initialisation of the full model, deterministic in `seed`: N(0, 0.02) matrices, N(0, 0.01)
    positions, output projections scaled by 1/sqrt(2L) (Radford et al. 2019), zero biases, unit norms."""
    gen = torch.Generator().manual_seed(seed)
    sd = {k: v.clone() for k, v in GPTParams(cfg).state_dict().items()}
    for key, value in sd.items():
        if key == "wte" or key.endswith(".w1"):
            value.normal_(0.0, 0.02, generator=gen)
        elif key == "wpe":
            value.normal_(0.0, 0.01, generator=gen)
        elif key.endswith(".w2"):
            value.normal_(0.0, 0.02 / math.sqrt(2 * cfg.layers), generator=gen)
    return sd


def hf_to_state_dict(state_dict: dict[str, torch.Tensor], cfg: GPTConfig) -> dict[str, torch.Tensor]:
    """A Hugging Face `GPT2LMHeadModel` / `GPT2Model` state dict in the runtime's names (full tensors).
    HF's Conv1D stores [in, out]: w1 = c_attn / c_fc weight transposed, w2 = c_proj weight as is."""
    sd = {k.removeprefix("transformer."): v for k, v in state_dict.items()}
    out = {"wte": sd["wte.weight"], "wpe": sd["wpe.weight"], "lnf_w": sd["ln_f.weight"], "lnf_b": sd["ln_f.bias"]}
    for layer in range(cfg.layers):
        pre = f"h.{layer}."
        for ours, ln, first, second in (("attn", "ln_1", "attn.c_attn", "attn.c_proj"),
                                        ("mlp", "ln_2", "mlp.c_fc", "mlp.c_proj")):
            dst = f"layers.{layer}.{ours}."
            out[dst + "ln_w"], out[dst + "ln_b"] = sd[pre + ln + ".weight"], sd[pre + ln + ".bias"]
            out[dst + "w1"] = sd[pre + first + ".weight"].t()  # [h, n1] (in, out) -> [n1, h]
            out[dst + "b1"] = sd[pre + first + ".bias"]
            out[dst + "w2"] = sd[pre + second + ".weight"]  # [n2, h] (in, out)
            out[dst + "b2"] = sd[pre + second + ".bias"]
    return {k: v.detach().clone().float().contiguous() for k, v in out.items()}


def _attention(a: torch.Tensor, heads: int, causal: bool) -> torch.Tensor:
    b, s, _ = a.shape
    q, k, v = (z.view(b, s, heads, -1).transpose(1, 2) for z in a.chunk(3, dim=-1))  # [b, heads, s, d]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # [b, heads, s, s]
    if causal:
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool, device=a.device).triu(1), float("-inf"))
    o = torch.softmax(scores, dim=-1) @ v  # [b, heads, s, d]
    return o.transpose(1, 2).reshape(b, s, -1)  # [b, heads, s, d] -> [b, s, h]


def reference_sublayer(x: torch.Tensor, w, kind: str, cfg: GPTConfig) -> torch.Tensor:
    """One full sub-layer in plain autograd: x + core(LN(x) w1^T + b1) w2 + b2; `w` has attributes or
    keys ln_w, ln_b, w1, b1, w2, b2 (full shapes); x [b, s, h] in natural order."""
    get = (lambda n: w[n]) if isinstance(w, dict) else (lambda n: getattr(w, n))
    u = F.layer_norm(x, (cfg.hidden,), get("ln_w"), get("ln_b"), cfg.eps)
    a = u @ get("w1").t() + get("b1")  # [b, s, h] -> [b, s, n1]
    c = _attention(a, cfg.heads, cfg.causal) if kind == "attention" else F.gelu(a, approximate="tanh")
    return x + c @ get("w2") + get("b2")  # [b, s, n2] -> [b, s, h]


class ReferenceGPT(GPTParams):
    """Single-device GPT-2 in plain autograd, the oracle of the runtime tests."""

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None):
        """input_ids [b, s] -> logits [b, s, V] (and the mean loss over labels != -100, which are the
        per-position targets, already shifted)."""
        cfg = self.cfg
        h = cfg.hidden
        x = self.wte[input_ids] + self.wpe[: input_ids.shape[1]]
        for blk in self.layers:
            x = reference_sublayer(reference_sublayer(x, blk.attn, "attention", cfg), blk.mlp, "mlp", cfg)
        logits = F.layer_norm(x, (h,), self.lnf_w, self.lnf_b, cfg.eps) @ self.wte.t()
        if labels is None:
            return logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100)  # [b*s, V]
        return logits, loss
