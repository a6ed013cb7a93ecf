"""A Hugging Face `config.json`'s architecture, checked once for every reader (`hf_architecture`):
`load_hf_config` (`cost`, `plan`, `train --model config.json`) and the runtime's
`GPTConfig.from_hf` build their models from the same dict, so both accept and refuse the
same configs: GPT-2's layer and LLaMA's (Mistral's and Qwen2's are LLaMA's), with the rotary embeddings' settings
read from either transformers layout (`hf_rope`).
"""

from __future__ import annotations

from paradyse_lab.core.hf_field_types import check_field_types
from paradyse_lab.errors import UserInputError
from paradyse_lab.files.typed_json import bool_field, int_field, number_field, object_field, str_field, written


def hf_rope(cfg: dict, where: str = "model config") -> tuple[float, str, tuple[float, float, float, int] | None]:
    """(rope_theta, rope_type, Llama 3.1 scaling or None) of a Hugging Face config dict: `rope_theta` and
    `rope_scaling` (transformers < 5) or `rope_parameters` (transformers >= 5), each field checked."""
    rope = {**object_field(cfg, "rope_scaling", where), **object_field(cfg, "rope_parameters", where)}
    theta = number_field(rope, "rope_theta", where, default=None) or number_field(cfg, "rope_theta", where,
                                                                                   default=10000.0)
    rope_type = str_field(rope, "rope_type", where, default=str_field(rope, "type", where, default="default"))
    llama3 = None
    if rope_type == "llama3":
        missing = [k for k in ("factor", "low_freq_factor", "high_freq_factor") if rope.get(k) is None]
        if missing:
            raise UserInputError(f"{where}: rope_scaling of rope_type 'llama3' needs factor, low_freq_factor, "
                                 f"high_freq_factor and original_max_position_embeddings; missing {missing[0]}")
        original = int_field(rope, "original_max_position_embeddings", where, default=None)
        llama3 = (number_field(rope, "factor", where, default=None),
                  number_field(rope, "low_freq_factor", where, default=None),
                  number_field(rope, "high_freq_factor", where, default=None),
                  original or int_field(cfg, "max_position_embeddings", where))
    return theta, rope_type, llama3


HF_MODEL_TYPES = ("gpt2", "llama", "mistral", "qwen2")
"""`model_type`s of the Hugging Face configs read (`hf_architecture`); the last three share LLaMA's layer."""


def _refuse_unless(ok: bool, field_name: str, value, allowed: str) -> None:
    if not ok:
        raise UserInputError(f"{field_name} {written(value)} is not supported by the LLaMA / GPT-2 layer; "
                             f"allowed: {allowed}")


def _gpt2_architecture(cfg: dict, where: str) -> dict:
    act = str_field(cfg, "activation_function", where, default="gelu_new")
    _refuse_unless(act in ("gelu_new", "gelu_pytorch_tanh"), "activation_function", act,
                   "'gelu_new' or 'gelu_pytorch_tanh' (tanh-GELU)")
    for flag, wanted in (("tie_word_embeddings", True), ("scale_attn_weights", True),
                         ("scale_attn_by_inverse_layer_idx", False), ("add_cross_attention", False)):
        value = bool_field(cfg, flag, where, default=wanted)  # transformers' GPT2Config defaults
        _refuse_unless(value == wanted, flag, value, written(wanted))
    return dict(model_type="gpt2", hidden=int_field(cfg, "n_embd", where), heads=int_field(cfg, "n_head", where),
                kv_heads=0, layers=int_field(cfg, "n_layer", where),
                ffn_hidden=int_field(cfg, "n_inner", where, default=0),
                vocab_size=int_field(cfg, "vocab_size", where), max_positions=int_field(cfg, "n_positions", where),
                eps=number_field(cfg, "layer_norm_epsilon", where, default=1e-5), bias=True, qkv_bias=False,
                tied=True, rope_theta=0.0, rope_llama3=None, norm="layernorm", ffn_kind="gelu")


def _refuse_sliding_window(cfg: dict, model_type: str, where: str) -> None:
    if model_type == "mistral":
        _refuse_unless(cfg.get("sliding_window") is None, "sliding_window", cfg.get("sliding_window"),
                       "null (full attention)")
    if model_type == "qwen2":
        used = bool_field(cfg, "use_sliding_window", where, default=False)
        _refuse_unless(not used, "use_sliding_window", used, "false (full attention)")


def hf_architecture(cfg: dict, where: str = "model config") -> dict:
    """The architecture of a Hugging Face config dict, checked once for every reader: `load_hf_config`
    (`cost`, `plan`, `train --model config.json`) and the runtime's `GPTConfig.from_hf` build their models
    from this dict, so both accept and refuse the same configs.

    Accepted: GPT-2 (`model_type` 'gpt2', tanh-GELU `activation_function`) and LLaMA's layer (transformers'
    modeling_llama; Mistral's and Qwen2's are the same, Qwen2 with biases on q, k, v only) with `hidden_act`
    'silu', rotary embeddings unscaled or with Llama 3.1's scaling, `head_dim` = hidden / heads, full
    attention, and either no biases or biases on every linear layer (`attention_bias` = `mlp_bias`).
    Refused with one line naming the field: other model types and activations, rotary scalings other than
    'llama3' ('linear', 'dynamic', 'yarn'...), Mistral's `sliding_window` and Qwen2's `use_sliding_window`,
    a `head_dim` other than hidden / heads, unequal attention and MLP biases; and every field read with
    another JSON type or out of range (a size is a JSON integer >= 1, a flag
    `true` / `false`, an epsilon or rotary base a number > 0, `num_key_value_heads` divides the heads), and
    every other typed field of a Hugging Face config with another JSON type, read or not (`check_field_types`);
    GPT-2 configs whose attention or embeddings differ from GPT-2's (`scale_attn_weights` false,
    `scale_attn_by_inverse_layer_idx` or `add_cross_attention` true, `tie_word_embeddings` false).
    Keys: model_type, hidden, heads, kv_heads, layers, ffn_hidden (0: 4h), vocab_size, max_positions
    (GPT-2's learned positions, LLaMA's max_position_embeddings or 0), eps, bias, qkv_bias, tied,
    rope_theta (0 for GPT-2), rope_llama3, norm, ffn_kind.
    """
    model_type = str_field(cfg, "model_type", where, default="gpt2" if "n_embd" in cfg else "llama")
    if model_type == "gpt2":
        arch = _gpt2_architecture(cfg, where)
        check_field_types(cfg, where)
        return arch
    if model_type not in HF_MODEL_TYPES:
        raise UserInputError(f"model_type {written(model_type)} is not supported; valid: {', '.join(HF_MODEL_TYPES)}")
    hidden, heads = int_field(cfg, "hidden_size", where), int_field(cfg, "num_attention_heads", where)
    act = cfg.get("hidden_act", "silu")
    _refuse_unless(act == "silu", "hidden_act", act, "'silu'")
    theta, rope_type, llama3 = hf_rope(cfg, where)
    _refuse_unless(rope_type in ("default", "llama3"), "rope_scaling", rope_type,
                   "null (unscaled rotary embeddings) or rope_type 'llama3'")
    head_dim = int_field(cfg, "head_dim", where, default=hidden // heads)
    _refuse_unless(head_dim * heads == hidden, "head_dim", head_dim, f"hidden_size / num_attention_heads = "
                   f"{hidden / heads:g}")
    _refuse_sliding_window(cfg, model_type, where)
    attn_bias = bool_field(cfg, "attention_bias", where, default=False)
    mlp_bias = bool_field(cfg, "mlp_bias", where, default=False)
    _refuse_unless(attn_bias == mlp_bias, "attention_bias / mlp_bias", f"{attn_bias} / {mlp_bias}", "equal")
    kv_heads = int_field(cfg, "num_key_value_heads", where, default=heads)
    if heads % kv_heads:
        raise UserInputError(f"{where}: num_key_value_heads must divide num_attention_heads ({heads}), "
                             f"got {written(cfg['num_key_value_heads'])}")
    arch = dict(model_type=model_type, hidden=hidden, heads=heads, kv_heads=kv_heads,
                layers=int_field(cfg, "num_hidden_layers", where),
                ffn_hidden=int_field(cfg, "intermediate_size", where),
                vocab_size=int_field(cfg, "vocab_size", where),
                max_positions=int_field(cfg, "max_position_embeddings", where, default=0),
                eps=number_field(cfg, "rms_norm_eps", where, default=1e-6), bias=attn_bias,
                qkv_bias=model_type == "qwen2", tied=bool_field(cfg, "tie_word_embeddings", where, default=False),
                rope_theta=theta, rope_llama3=llama3, norm="rmsnorm", ffn_kind="swiglu")
    check_field_types(cfg, where)
    return arch
