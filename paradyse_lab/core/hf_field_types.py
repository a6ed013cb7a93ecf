"""The JSON type of every typed field a Hugging Face GPT-2 / LLaMA `config.json` may hold, checked whether or not
the architecture reads the field: a flag written `"true"`, a token id written `"2"` or a dropout written
`"0.1"` is a config no Hugging Face loader builds the same model from, so it is refused with one line naming the
field and the value as written, never passed over because the field happened to be unused.

The fields and their types are those of transformers' `PretrainedConfig`, `GPT2Config` and `LlamaConfig` /
`MistralConfig` / `Qwen2Config` (configuration_utils.py and each configuration_*.py). Fields not listed here are
not checked (a config may carry tool-specific keys).
"""

from __future__ import annotations

import math

from paradyse_lab.errors import UserInputError
from paradyse_lab.files.typed_json import written

FLAGS = ("tie_word_embeddings", "attention_bias", "mlp_bias", "use_cache", "use_sliding_window",
         "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention",
         "is_encoder_decoder", "is_decoder", "return_dict", "output_hidden_states", "output_attentions",
         "torchscript", "use_bfloat16", "pretraining_tp_enabled", "summary_proj_to_labels", "summary_use_proj")
"""Fields that are JSON `true` / `false` (or null)."""
INTEGERS = ("bos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id", "sliding_window",
            "max_window_layers", "pretraining_tp", "n_ctx", "num_labels", "head_dim", "n_inner",
            "original_max_position_embeddings")
"""Fields that are a JSON integer >= 0 (or null); `eos_token_id` may also be a list of them."""
NUMBERS = ("attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_first_dropout", "attention_dropout",
           "initializer_range", "layer_norm_epsilon", "rms_norm_eps", "rope_theta")
"""Fields that are a finite JSON number >= 0 (or null)."""
STRINGS = ("model_type", "hidden_act", "activation_function", "torch_dtype", "dtype", "transformers_version",
           "summary_type", "summary_activation")
"""Fields that are a JSON string (or null)."""


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _refuse(where: str, key: str, value, rule: str) -> UserInputError:
    return UserInputError(f"{where}: {key} must be {rule}, got {written(value)}")


def check_field_types(cfg: dict, where: str) -> None:
    """A one-line `UserInputError` for the first field of `cfg` (module docstring) whose JSON type is not its
    own; null passes everywhere (transformers' default)."""
    for key in FLAGS:
        if cfg.get(key) is not None and not isinstance(cfg[key], bool):
            raise _refuse(where, key, cfg[key], "true or false")
    for key in INTEGERS:
        if cfg.get(key) is not None and not _integer(cfg[key]):
            raise _refuse(where, key, cfg[key], "an integer >= 0 or null")
    eos = cfg.get("eos_token_id")
    if eos is not None and not (_integer(eos) or (isinstance(eos, list) and all(_integer(t) for t in eos))):
        raise _refuse(where, "eos_token_id", eos, "an integer >= 0, a list of them, or null")
    for key in NUMBERS:
        value = cfg.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value < 0):
            raise _refuse(where, key, value, "a finite number >= 0 or null")
    for key in STRINGS:
        if cfg.get(key) is not None and not isinstance(cfg[key], str):
            raise _refuse(where, key, cfg[key], "a string or null")
    architectures = cfg.get("architectures")
    if architectures is not None and not (isinstance(architectures, list)
                                          and all(isinstance(a, str) for a in architectures)):
        raise _refuse(where, "architectures", architectures, "a list of strings or null")
