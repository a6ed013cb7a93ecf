"""Hugging Face state dicts (GPT-2, LLaMA family) in the runtime's terms; their configs are read as a
`ModelSpec` by paradyse_lab.core.model_spec.spec_from_hf, the one reading of a Hugging Face config.

Library module (no command); `ParallelGPT.from_hf_state_dict(config, state_dict)` uses it (`hf_to_state_dict`).
Accepted:
- GPT-2 (`model_type` 'gpt2', `GPT2LMHeadModel`; Conv1D weights stored [in, out]: `hf_to_state_dict`);
- LLaMA (`LlamaForCausalLM`, transformers' modeling_llama), Mistral (`MistralForCausalLM`, the same layer)
  and Qwen2 (`Qwen2ForCausalLM`: the same layer with biases on q, k, v only, `ModelSpec.qkv_bias`)
  with `hidden_act` 'silu', rotary embeddings unscaled or with Llama 3.1's scaling (`rope_scaling` null,
  type 'default' or 'llama3'; top-level `rope_theta`, or `rope_parameters` from transformers 5 on),
  `head_dim` = hidden / heads, no sliding window, and either no biases or biases on every linear layer
  (`attention_bias` = `mlp_bias`).
Refused with a one-line error naming the field: rotary embeddings scaled other than 'llama3' ('linear',
'dynamic', 'yarn'...), sliding-window attention (Mistral's `sliding_window`, Qwen2's `use_sliding_window`),
other activations (paradyse_lab.core.hf_architecture.hf_architecture's checks).
State-dict names (LlamaForCausalLM): `model.embed_tokens.weight`, per layer `model.layers.L.input_layernorm`,
`self_attn.{q,k,v,o}_proj`, `post_attention_layernorm`, `mlp.{gate,up,down}_proj`, then `model.norm` and
`lm_head` (nn.Linear weights are [out, in]): w1 = cat(q, k, v) [h + 2kv, h], w2 = o_proj^T [h, h];
MLP w1 = cat(gate, up) [2f, h], w2 = down_proj^T [f, h].
"""

from __future__ import annotations

import torch


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


def hf_to_state_dict(state_dict: dict[str, torch.Tensor], cfg) -> dict[str, torch.Tensor]:
    """A Hugging Face `GPT2LMHeadModel` / `GPT2Model` (or, for a rotary `cfg`, `LlamaForCausalLM`:
    `llama_to_state_dict`) state dict in the runtime's names (full tensors).
    HF's Conv1D stores [in, out]: w1 = c_attn / c_fc weight transposed, w2 = c_proj weight as is."""
    if cfg.rope:
        return llama_to_state_dict(state_dict, cfg)
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
