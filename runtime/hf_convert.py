"""Hugging Face configs and LLaMA-family state dicts in the runtime's terms.

Library module (no command); `ParallelGPT.from_hf_state_dict(config, state_dict)` uses it. Accepted:
- GPT-2 (`model_type` 'gpt2', `GPT2LMHeadModel`; the conversion is reference.hf_to_state_dict);
- LLaMA (`LlamaForCausalLM`, transformers' modeling_llama), Mistral (`MistralForCausalLM`, the same layer)
  and Qwen2 (`Qwen2ForCausalLM`: the same layer with biases on q, k, v only, `GPTConfig.qkv_bias`)
  with `hidden_act` 'silu', rotary embeddings unscaled or with Llama 3.1's scaling (`rope_scaling` null,
  type 'default' or 'llama3'; top-level `rope_theta`, or `rope_parameters` from transformers 5 on),
  `head_dim` = hidden / heads, no sliding window, and either no biases or biases on every linear layer
  (`attention_bias` = `mlp_bias`).
Refused with a one-line error naming the field: rotary embeddings scaled other than 'llama3' ('linear',
'dynamic', 'yarn'...), sliding-window attention (Mistral's `sliding_window`, Qwen2's `use_sliding_window`),
other activations.
State-dict names (LlamaForCausalLM): `model.embed_tokens.weight`, per layer `model.layers.L.input_layernorm`,
`self_attn.{q,k,v,o}_proj`, `post_attention_layernorm`, `mlp.{gate,up,down}_proj`, then `model.norm` and
`lm_head` (nn.Linear weights are [out, in]): w1 = cat(q, k, v) [h + 2kv, h], w2 = o_proj^T [h, h];
MLP w1 = cat(gate, up) [2f, h], w2 = down_proj^T [f, h].
"""

from __future__ import annotations

import torch

from paradyse_lab.errors import UserInputError
from paradyse_lab.model_spec import hf_rope

LLAMA_TYPES = ("llama", "mistral", "qwen2")
"""`model_type`s whose decoder layer is LLaMA's (Qwen2's with q/k/v biases)."""


def config_from_hf(cls, cfg: dict):
    """A `GPTConfig` (cls) from a Hugging Face config dict."""
    model_type = cfg.get("model_type", "gpt2" if "n_embd" in cfg else "llama")
    if model_type == "gpt2":
        act = cfg.get("activation_function", "gelu_new")
        if act not in ("gelu_new", "gelu_pytorch_tanh"):
            raise UserInputError(f"activation_function {act!r} is not supported; the runtime uses tanh-GELU")
        return cls(vocab_size=int(cfg["vocab_size"]), max_positions=int(cfg["n_positions"]),
                   hidden=int(cfg["n_embd"]), heads=int(cfg["n_head"]), layers=int(cfg["n_layer"]),
                   ffn_hidden=int(cfg.get("n_inner") or 0), eps=float(cfg.get("layer_norm_epsilon", 1e-5)))
    if model_type not in LLAMA_TYPES:
        raise UserInputError(f"model_type {model_type!r} is not supported; valid: gpt2, llama, mistral, qwen2")
    hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    _refuse_unless(cfg.get("hidden_act", "silu") == "silu", "hidden_act", cfg.get("hidden_act"), "'silu'")
    theta, rope_type, llama3 = hf_rope(cfg)
    _refuse_unless(rope_type in ("default", "llama3"), "rope_scaling", rope_type,
                   "null (unscaled rotary embeddings) or rope_type 'llama3'")
    head_dim = cfg.get("head_dim") or hidden // heads
    _refuse_unless(head_dim * heads == hidden, "head_dim", head_dim,
                   f"hidden_size / num_attention_heads = {hidden // heads}")
    if model_type == "mistral":
        _refuse_unless(cfg.get("sliding_window") is None, "sliding_window", cfg.get("sliding_window"),
                       "null (full attention)")
    if model_type == "qwen2":
        _refuse_unless(not cfg.get("use_sliding_window"), "use_sliding_window", cfg.get("use_sliding_window"),
                       "false (full attention)")
    attn_bias, mlp_bias = bool(cfg.get("attention_bias", False)), bool(cfg.get("mlp_bias", False))
    _refuse_unless(attn_bias == mlp_bias, "attention_bias / mlp_bias", f"{attn_bias} / {mlp_bias}", "equal")
    return cls(vocab_size=int(cfg["vocab_size"]), max_positions=int(cfg.get("max_position_embeddings") or 0),
               hidden=hidden, heads=heads, layers=int(cfg["num_hidden_layers"]),
               ffn_hidden=int(cfg["intermediate_size"]), eps=float(cfg.get("rms_norm_eps", 1e-6)),
               kv_heads=int(cfg.get("num_key_value_heads") or heads), norm="rmsnorm", ffn_kind="swiglu",
               bias=attn_bias, qkv_bias=model_type == "qwen2", rope_theta=theta, rope_llama3=llama3,
               tied=bool(cfg.get("tie_word_embeddings", False)))


def _refuse_unless(ok: bool, field: str, value, allowed: str) -> None:
    if not ok:
        raise UserInputError(f"{field} {value!r} is not supported by the runtime's LLaMA layer; allowed: {allowed}")


def llama_to_state_dict(state_dict: dict[str, torch.Tensor], cfg) -> dict[str, torch.Tensor]:
    """A `LlamaForCausalLM` / `LlamaModel` state dict in the runtime's names (full fp32 tensors)."""
    sd = {k.removeprefix("model."): v for k, v in state_dict.items()}
    empty = torch.zeros(0)
    out = {"wte": sd["embed_tokens.weight"], "wpe": torch.zeros(0, cfg.hidden), "lnf_w": sd["norm.weight"],
           "lnf_b": empty}
    if not cfg.tied:
        out["head"] = sd["lm_head.weight"] if "lm_head.weight" in sd else state_dict["lm_head.weight"]
    for layer in range(cfg.layers):
        pre, dst = f"layers.{layer}.", f"layers.{layer}."

        def bias(name: str, pre=pre, present=cfg.bias) -> torch.Tensor:
            return sd[pre + name + ".bias"] if present else empty

        attn = [f"self_attn.{x}_proj" for x in "qkv"]
        out[dst + "attn.ln_w"], out[dst + "attn.ln_b"] = sd[pre + "input_layernorm.weight"], empty
        out[dst + "attn.w1"] = torch.cat([sd[pre + n + ".weight"] for n in attn])  # [h + 2kv, h] (out, in)
        out[dst + "attn.b1"] = torch.cat([bias(n, present=cfg.bias or cfg.qkv_bias) for n in attn])
        out[dst + "attn.w2"] = sd[pre + "self_attn.o_proj.weight"].t()  # [h, h] (out, in) -> (in, out)
        out[dst + "attn.b2"] = bias("self_attn.o_proj")
        mlp = ["mlp.gate_proj", "mlp.up_proj"]
        out[dst + "mlp.ln_w"], out[dst + "mlp.ln_b"] = sd[pre + "post_attention_layernorm.weight"], empty
        out[dst + "mlp.w1"] = torch.cat([sd[pre + n + ".weight"] for n in mlp])  # [2f, h] (out, in)
        out[dst + "mlp.b1"] = torch.cat([bias(n) for n in mlp])
        out[dst + "mlp.w2"] = sd[pre + "mlp.down_proj.weight"].t()  # [h, f] (out, in) -> [f, h] (in, out)
        out[dst + "mlp.b2"] = bias("mlp.down_proj")
    return {k: v.detach().clone().float().contiguous() for k, v in out.items()}
