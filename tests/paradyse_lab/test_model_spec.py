import json
from dataclasses import replace

import pytest

from paradyse_lab.core.model_spec import PRESETS, ModelSpec, get_model, load_hf_config
from paradyse_lab.errors import UserInputError


def test_paper_presets_match_table4():
    """ParaDySe Table 4 with the layers run on the node (docs/paper.md section 6)."""
    assert (PRESETS["bert"].hidden, PRESETS["bert"].heads, PRESETS["bert"].layers) == (1024, 16, 24)
    assert (PRESETS["llama"].hidden, PRESETS["llama"].heads, PRESETS["llama"].layers) == (8192, 64, 8)
    assert (PRESETS["gpt"].hidden, PRESETS["gpt"].heads, PRESETS["gpt"].layers) == (12288, 96, 8)
    for name in ("bert", "llama", "gpt"):
        assert PRESETS[name].ffn_hidden == 4 * PRESETS[name].hidden
        assert not PRESETS[name].embedding_and_head
    assert not PRESETS["bert"].causal and PRESETS["gpt"].causal


def test_all_presets_present():
    expected = {"bert", "llama", "gpt", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt2-tiny", "llama3-8b"}
    assert expected <= set(PRESETS)
    assert PRESETS["gpt2-xl"].hidden == 1600 and PRESETS["gpt2-xl"].heads == 25
    llama3 = PRESETS["llama3-8b"]
    assert llama3.kv_heads == 8 and llama3.kv_hidden == 1024 and llama3.ffn_kind == "swiglu"


@pytest.mark.parametrize("name, config", [
    ("llama3-8b", {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
                   "intermediate_size": 14336}),
    ("llama3-70b", {"hidden_size": 8192, "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 80,
                    "intermediate_size": 28672}),
])
def test_llama3_presets_equal_their_config_json(tmp_path, name, config):
    """The shapes of meta-llama/Meta-Llama-3-8B and -70B's config.json (Hugging Face), read by load_hf_config,
    equal the presets."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "vocab_size": 128256, "rope_theta": 500000.0,
                                "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu",
                                "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16", **config}))
    loaded = load_hf_config(path)
    assert loaded == replace(PRESETS[name], name=loaded.name)
    assert not loaded.tied and loaded.rope_theta == 500000.0 and loaded.max_positions == 0
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}  # Llama 3.1's config.json
    path.write_text(json.dumps({"model_type": "llama", "vocab_size": 128256, "rope_scaling": scaling, **config}))
    assert load_hf_config(path).rope_llama3 == (8.0, 1.0, 4.0, 8192)


def test_gpt2_tiny_splits_over_one_to_four_ranks():
    tiny = PRESETS["gpt2-tiny"]
    assert all(tiny.heads % p == 0 and tiny.hidden % p == 0 for p in (1, 2, 3, 4))


@pytest.mark.parametrize("kwargs, field", [
    (dict(hidden=0), "hidden"), (dict(heads=5), "heads"), (dict(kv_heads=5), "kv_heads"),
    (dict(ffn_kind="relu"), "ffn_kind"), (dict(dtype="int8"), "dtype"),
])
def test_invalid_model_names_the_field(kwargs, field):
    base = dict(name="x", hidden=64, heads=4, layers=2, ffn_hidden=256, vocab_size=10)
    with pytest.raises(UserInputError, match=field):
        ModelSpec(**{**base, **kwargs})


def test_load_gpt2_and_llama_configs(tmp_path):
    d = tmp_path / "mygpt"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "model_type": "gpt2", "n_embd": 128, "n_head": 4, "n_layer": 3, "n_inner": None,
        "vocab_size": 1000, "n_positions": 256}))
    m = get_model(str(d / "config.json"))
    assert (m.name, m.hidden, m.heads, m.layers, m.ffn_hidden, m.max_positions) == ("mygpt", 128, 4, 3, 512, 256)
    (tmp_path / "llama.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
        "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 128256, "torch_dtype": "bfloat16"}))
    m = load_hf_config(tmp_path / "llama.json")
    assert m.kv_heads == 8 and m.ffn_kind == "swiglu" and m.norm == "rmsnorm" and not m.bias


def test_bad_config_files(tmp_path):
    with pytest.raises(UserInputError, match="does not exist"):
        load_hf_config(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(UserInputError, match="not valid JSON"):
        load_hf_config(tmp_path / "bad.json")
    (tmp_path / "partial.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 64}))
    with pytest.raises(UserInputError, match="n_head"):
        load_hf_config(tmp_path / "partial.json")
    with pytest.raises(UserInputError, match="valid: .*gpt2-tiny"):
        get_model("no-such-model")


def test_qwen2_config_has_qkv_biases_only(tmp_path):
    """Qwen2's decoder layer is LLaMA's with biases on q, k, v only: the cost model counts those biases and no
    output or MLP bias."""
    from paradyse_lab.costmodel.formulas import attention_sharded_params, mlp_sharded_params, replicated_params

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 4,
                                "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 128,
                                "vocab_size": 100}))
    spec = load_hf_config(path)
    assert spec.qkv_bias and not spec.bias
    plain = replace(spec, qkv_bias=False)
    assert attention_sharded_params(spec) - attention_sharded_params(plain) == 64 + 2 * 32
    assert mlp_sharded_params(spec) == mlp_sharded_params(plain) and replicated_params(spec) == 64


_SMALL_LLAMA = {"model_type": "llama", "hidden_size": 96, "num_attention_heads": 8, "num_key_value_heads": 2,
                "num_hidden_layers": 2, "intermediate_size": 192, "vocab_size": 100, "max_position_embeddings": 64}


@pytest.mark.parametrize("change, fragment", [
    ({"model_type": "mistral", "head_dim": 16}, "head_dim 16"),
    ({"model_type": "mistral", "sliding_window": 4096}, "sliding_window 4096"),
    ({"model_type": "qwen2", "use_sliding_window": True}, "use_sliding_window true"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, 'rope_scaling "yarn"'),
    ({"rope_scaling": {"type": "linear", "factor": 2.0}}, 'rope_scaling "linear"'),
    ({"attention_bias": True, "mlp_bias": False}, "attention_bias / mlp_bias"),
    ({"hidden_act": "gelu"}, 'hidden_act "gelu"'),
])
def test_config_json_the_runtime_refuses_is_refused_for_cost_and_train(tmp_path, change, fragment):
    """A config.json whose layer the runtime's loader refuses (head_dim other than hidden / heads, sliding
    windows, rotary scalings other than Llama 3.1's, MLP biases unlike the attention's) is refused by
    load_hf_config too (`cost`, `plan`, `train --model config.json`), with one line naming the field,
    instead of being read as another architecture."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**_SMALL_LLAMA, **change}))
    with pytest.raises(UserInputError, match=fragment.replace("(", r"\(")) as err:
        load_hf_config(path)
    assert "\n" not in str(err.value)


def test_config_json_carries_the_norm_epsilon(tmp_path):
    """Qwen2's rms_norm_eps 1e-6 (and GPT-2's layer_norm_epsilon) reach the ModelSpec the runtime builds from."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**_SMALL_LLAMA, "model_type": "qwen2", "rms_norm_eps": 1e-6,
                                "head_dim": 12, "use_sliding_window": False}))
    assert load_hf_config(path).norm_eps == 1e-6
    path.write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 10,
                                "n_positions": 32, "layer_norm_epsilon": 1e-6}))
    assert load_hf_config(path).norm_eps == 1e-6


_SMALL_GPT2 = '"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 100, "n_positions": 64'
_SMALL_LLAMA_TEXT = json.dumps(_SMALL_LLAMA)[1:-1]


@pytest.mark.parametrize("base, field, written", [
    (_SMALL_LLAMA_TEXT, "tie_word_embeddings", '"false"'),
    (_SMALL_GPT2, "n_embd", "64.9"),
    (_SMALL_GPT2, "n_embd", "64.0"),
    (_SMALL_GPT2, "n_head", "true"),
    (_SMALL_GPT2, "n_layer", '"2"'),
    (_SMALL_GPT2, "n_layer", "0"),
    (_SMALL_GPT2, "vocab_size", "-1"),
    (_SMALL_GPT2, "n_inner", "1e400"),
    (_SMALL_LLAMA_TEXT, "num_key_value_heads", "0"),
    (_SMALL_LLAMA_TEXT, "num_key_value_heads", "3"),
    (_SMALL_LLAMA_TEXT, "torch_dtype", '"float64"'),
    (_SMALL_LLAMA_TEXT, "dtype", '"int8"'),
    (_SMALL_GPT2, "layer_norm_epsilon", "-1e-05"),
    (_SMALL_GPT2, "layer_norm_epsilon", "0"),
    (_SMALL_LLAMA_TEXT, "rms_norm_eps", "NaN"),
    (_SMALL_LLAMA_TEXT, "rms_norm_eps", '"1e-6"'),
    (_SMALL_LLAMA_TEXT, "rope_theta", "-10000.0"),
    (_SMALL_LLAMA_TEXT, "attention_bias", "1"),
    (_SMALL_LLAMA_TEXT, "max_position_embeddings", "64.5"),
    (_SMALL_LLAMA_TEXT, "head_dim", "12.0"),
    (_SMALL_LLAMA_TEXT, "rope_scaling", '"llama3"'),
    (_SMALL_LLAMA_TEXT, "hidden_act", "null"),
    (_SMALL_GPT2, "model_type", "7"),
])
def test_config_json_fields_are_checked_not_coerced(tmp_path, base, field, written):
    """Every config.json field the toolkit reads is checked for its JSON type and range, not coerced (a string
    "false" is not read as true, 64.9 not as 64, 0 K/V heads not as multi-head attention, float64 not as bf16,
    a negative epsilon not accepted): one line naming the field and the value as written in the file."""
    path = tmp_path / "config.json"
    path.write_text("{" + base + f', "{field}": {written}' + "}")
    with pytest.raises(UserInputError) as err:
        load_hf_config(path)
    message = str(err.value)
    assert field in message and written in message and "\n" not in message, message


def test_a_byte_order_mark_is_no_part_of_a_config_a_cluster_or_a_token_file(tmp_path):
    """An editor's UTF-8 byte-order mark before config.json, a cluster TOML or a token JSONL's first line is
    skipped, as length files skip it: the file reads as without it (it was 'not valid JSON: Unexpected UTF-8 BOM',
    'not valid TOML: Invalid statement', and a token file's 'line 1: not JSON' under train but not under workload)."""
    from paradyse_lab.cluster.files import get_cluster
    from paradyse_lab.runtime.training.run_inputs import TokenDocuments

    config = "{" + _SMALL_GPT2 + "}"
    (tmp_path / "plain.json").write_text(config)
    (tmp_path / "marked.json").write_text("\ufeff" + config, encoding="utf-8")
    assert replace(load_hf_config(tmp_path / "marked.json"), name="x") == replace(
        load_hf_config(tmp_path / "plain.json"), name="x")
    toml = 'base = "a100-80gb-x8"\nmemory_gib = 40\n'
    (tmp_path / "plain.toml").write_text(toml)
    (tmp_path / "marked.toml").write_text("\ufeff" + toml, encoding="utf-8")
    assert replace(get_cluster(str(tmp_path / "marked.toml")), name="x") == replace(
        get_cluster(str(tmp_path / "plain.toml")), name="x")
    (tmp_path / "tokens.jsonl").write_text("\ufeff[1, 2, 3]\n[4, 5]\n", encoding="utf-8")
    assert TokenDocuments.from_dataset(f"file:{tmp_path / 'tokens.jsonl'}").docs == [[1, 2, 3], [4, 5]]
