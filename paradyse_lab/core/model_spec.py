"""Transformer shapes (`ModelSpec`) and their presets.

Sources of the presets:
- `bert`, `llama`, `gpt`: ParaDySe (arXiv 2511.13198) Table 4, with the number of layers the paper runs
  on its node (24, 8, 8). The paper's layer is the one of its Table 2 (multi-head attention, a 4h GELU MLP)
  for all three; BERT's and LLaMA's hidden sizes were lost in the available text and are the standard
  ones for those shapes (BERT-large 1024; LLaMA-65B 8192), see docs/paper.md section 6. The paper times the
  transformer layer stack only, so these presets carry no embedding or head.
- GPT-2 family: Radford et al. 2019 and the Hugging Face `gpt2*` config.json files
  (n_embd / n_head / n_layer: 768/12/12, 1024/16/24, 1280/20/36, 1600/25/48; vocab 50257; 1024 positions).
- `gpt2-tiny`: ours, a GPT-2-shaped model small enough for CPU tests (12 heads so p = 1, 2, 3, 4 all split).
- `gpt2-cpu`: ours, h 512, 8 heads, 4 layers, vocabulary 1024, fp32: the CPU benchmark of `paradyse-lab
  calibrate` and `validate-run` (docs/results.md, "Simulation against execution").
- `llama3-8b`, `llama3-70b`: the Hugging Face config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096,
  num_attention_heads 32, num_key_value_heads 8, num_hidden_layers 32, intermediate_size 14336) and of
  meta-llama/Meta-Llama-3-70B (8192, 64, 8, 80, 28672); both vocab_size 128256, rope_theta 500000,
  tie_word_embeddings false, RMSNorm, SwiGLU ("silu"), no biases.
- `llama-gqa8`: the paper's `llama` layer stack (h 8192, 64 heads, 8 of 80 layers) with 8 K/V heads (the
  grouped-query attention of LLaMA-2/3-70B) and still the paper's GELU MLP, so it differs from `llama` in
  the K/V heads only: `paradyse-lab cost --model llama-gqa8` (or `--model llama --kv-heads 8`) shows what
  GQA does to the strategies.
- `llama-tiny`: ours, a LLaMA-shaped model (RMSNorm, SwiGLU, RoPE, 8 heads sharing 2 K/V heads, untied
  head) small enough for CPU runs: `paradyse-lab train --model llama-tiny`.

A model may also be a Hugging Face `config.json` (`get_model`, `load_hf_config`), its architecture checked
(`hf_architecture`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from paradyse_lab.core.hf_architecture import hf_architecture
from paradyse_lab.errors import UserInputError, unknown_name
from paradyse_lab.files import input_files, typed_json
from paradyse_lab.files.typed_json import str_field

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
FFN_KINDS = ("gelu", "swiglu")
NORM_KINDS = ("layernorm", "rmsnorm")


@dataclass(frozen=True)
class ModelSpec:
    """Shapes of a decoder/encoder transformer, enough to count FLOPs, bytes and parameters."""

    name: str
    """Preset or file name, shown in tables."""
    hidden: int
    """Hidden size h."""
    heads: int
    """Attention (query) heads a."""
    layers: int
    """Transformer blocks L (the ones run on the node)."""
    ffn_hidden: int
    """Inner size f of the MLP (4h for GPT-2)."""
    kv_heads: int = 0
    """Key/value heads under grouped-query attention; 0 means equal to `heads` (multi-head attention)."""
    ffn_kind: str = "gelu"
    """'gelu' (two matrices) or 'swiglu' (gate, up, down: three matrices)."""
    norm: str = "layernorm"
    """'layernorm' (weight and bias) or 'rmsnorm' (weight only)."""
    norm_eps: float = 1e-5
    """The norms' epsilon (Hugging Face `layer_norm_epsilon` / `rms_norm_eps`); the runtime uses it."""
    bias: bool = True
    """Whether linear layers carry biases."""
    qkv_bias: bool = False
    """Biases on the q, k, v projections only (Qwen2), when `bias` is false."""
    vocab_size: int = 0
    """Vocabulary size (embedding and head)."""
    max_positions: int = 0
    """Learned position embeddings (GPT-2); 0 for rotary embeddings."""
    tied: bool = True
    """Whether the head shares the token embedding's matrix (GPT-2) or has its own (LLaMA)."""
    rope_theta: float = 0.0
    """Rotary embeddings' base (Hugging Face `rope_theta`) when `max_positions` is 0; 0: not given (10000)."""
    rope_llama3: tuple[float, float, float, int] | None = None
    """Llama 3.1's rotary frequency scaling (factor, low_freq_factor, high_freq_factor,
    original_max_position_embeddings), read from a config.json's rope_type 'llama3'; the runtime uses it."""
    embedding_and_head: bool = True
    """Whether the embedding, final norm and head are part of what is run and costed."""
    dtype: str = "bf16"
    """Training dtype of weights and activations: 'bf16', 'fp16' or 'fp32'."""
    causal: bool = True
    """Causal (decoder) or bidirectional (encoder) attention."""
    source: str = field(default="", compare=False)
    """Where the shapes come from."""

    def __post_init__(self):
        for name in ("hidden", "heads", "layers", "ffn_hidden"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise UserInputError(f"model.{name} must be a positive integer, got {value!r}")
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.kv_heads <= 0 or self.heads % self.kv_heads:
            raise UserInputError(
                f"model.kv_heads must divide model.heads ({self.heads}), got {self.kv_heads}"
            )
        if self.hidden % self.heads:
            raise UserInputError(
                f"model.hidden ({self.hidden}) must be divisible by model.heads ({self.heads})"
            )
        if self.ffn_kind not in FFN_KINDS:
            raise unknown_name("model.ffn_kind", self.ffn_kind, FFN_KINDS)
        if self.norm not in NORM_KINDS:
            raise unknown_name("model.norm", self.norm, NORM_KINDS)
        if self.dtype not in DTYPE_BYTES:
            raise unknown_name("model.dtype", self.dtype, DTYPE_BYTES)
        if self.vocab_size < 0 or self.max_positions < 0:
            raise UserInputError("model.vocab_size and model.max_positions must be >= 0")
        if self.embedding_and_head and self.vocab_size == 0:
            raise UserInputError("model.vocab_size must be > 0 when embedding_and_head is true")

    @property
    def head_dim(self) -> int:
        """d = h / a."""
        return self.hidden // self.heads

    @property
    def kv_hidden(self) -> int:
        """Width of K (and of V): kv_heads * d; equals h without GQA."""
        return self.kv_heads * self.head_dim

    @property
    def dtype_bytes(self) -> int:
        """Bytes per element of the training dtype."""
        return DTYPE_BYTES[self.dtype]

    def with_layers(self, layers: int) -> ModelSpec:
        """The same model with another number of layers."""
        return replace(self, layers=layers)


def _paper(name: str, hidden: int, heads: int, layers: int, causal: bool, note: str) -> ModelSpec:
    """A paper model: Table 2's layer (MHA, 4h GELU MLP with biases), layer stack only."""
    return ModelSpec(
        name=name, hidden=hidden, heads=heads, layers=layers, ffn_hidden=4 * hidden,
        embedding_and_head=False, causal=causal, source=note,
    )


def _gpt2(name: str, hidden: int, heads: int, layers: int, note: str, vocab: int = 50257,
          positions: int = 1024) -> ModelSpec:
    return ModelSpec(
        name=name, hidden=hidden, heads=heads, layers=layers, ffn_hidden=4 * hidden,
        vocab_size=vocab, max_positions=positions, source=note,
    )


PRESETS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        _paper("bert", 1024, 16, 24, False, "ParaDySe Table 4 (h inferred: BERT-large); 24 of 24 layers"),
        _paper("llama", 8192, 64, 8, True, "ParaDySe Table 4 (h inferred: LLaMA-65B); 8 of 80 layers"),
        _paper("gpt", 12288, 96, 8, True, "ParaDySe Table 4 (GPT-3 175B shapes); 8 of 96 layers"),
        _paper("bert-tiny", 128, 16, 2, False, "ours: the paper's bert layer at h 128 (16 heads: 2 per rank at "
               "p = 8), 2 layers, for CPU runs of the GPU session (`--quick --device cpu --models bert-tiny`)"),
        _paper("paper-7b", 4096, 32, 32, True, "the fourth shape of the ParaDySe authors' measured time fits "
               "(32 layers, h 4096, 32 heads: LLaMA-7B-like); not in the paper's Table 4"),
        _gpt2("gpt2", 768, 12, 12, "HF gpt2 config.json"),
        _gpt2("gpt2-medium", 1024, 16, 24, "HF gpt2-medium config.json"),
        _gpt2("gpt2-large", 1280, 20, 36, "HF gpt2-large config.json"),
        _gpt2("gpt2-xl", 1600, 25, 48, "HF gpt2-xl config.json"),
        _gpt2("gpt2-tiny", 96, 12, 4, "ours: GPT-2 layout for CPU runs", vocab=512),
        replace(_gpt2("gpt2-cpu", 512, 8, 4, "ours: GPT-2 layout for the CPU calibrate / validate-run "
                      "benchmark (small vocabulary, so the layers and not the head dominate; fp32, the CPU "
                      "runtime's dtype)", vocab=1024, positions=8192), dtype="fp32"),
        ModelSpec(
            name="llama3-8b", hidden=4096, heads=32, kv_heads=8, layers=32, ffn_hidden=14336,
            ffn_kind="swiglu", norm="rmsnorm", bias=False, vocab_size=128256, max_positions=0, tied=False,
            rope_theta=500000.0, norm_eps=1e-5, source="HF meta-llama/Meta-Llama-3-8B config.json",
        ),
        ModelSpec(
            name="llama3-70b", hidden=8192, heads=64, kv_heads=8, layers=80, ffn_hidden=28672,
            ffn_kind="swiglu", norm="rmsnorm", bias=False, vocab_size=128256, max_positions=0, tied=False,
            rope_theta=500000.0, norm_eps=1e-5, source="HF meta-llama/Meta-Llama-3-70B config.json",
        ),
        ModelSpec(
            name="qwen2-7b", hidden=3584, heads=28, kv_heads=4, layers=28, ffn_hidden=18944,
            ffn_kind="swiglu", norm="rmsnorm", bias=False, qkv_bias=True, vocab_size=152064, max_positions=0,
            tied=False, rope_theta=1000000.0, norm_eps=1e-6, source="HF Qwen/Qwen2-7B config.json (hidden_size "
            "3584, 28 heads, 4 key_value heads, 28 layers, intermediate_size 18944, vocab 152064, rope_theta 1e6)",
        ),
        replace(_paper("llama-gqa8", 8192, 64, 8, True, "the paper's llama (Table 4) with 8 K/V heads "
                       "(LLaMA-2/3-70B's grouped-query attention); 8 of 80 layers"), kv_heads=8),
        ModelSpec(
            name="llama-tiny", hidden=96, heads=8, kv_heads=2, layers=4, ffn_hidden=192, ffn_kind="swiglu",
            norm="rmsnorm", bias=False, vocab_size=512, max_positions=0, tied=False, rope_theta=10000.0,
            dtype="fp32", source="ours: LLaMA layout for CPU runs (head_dim 12: K/V width 24 splits for p = 1..4)",
        ),
    )
}


def get_model(name_or_path: str) -> ModelSpec:
    """A preset by name, or a model read from a Hugging Face `config.json` path or a model folder holding one."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    path = Path(name_or_path)
    if path.is_dir() and (path / "config.json").is_file():
        return load_hf_config(path / "config.json")
    if path.suffix == ".json" or path.is_file():
        return load_hf_config(path)
    raise unknown_name("model", name_or_path, list(PRESETS) + ["<path to config.json or its folder>"])


HF_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
"""Hugging Face `torch_dtype` / `dtype` names read, and the training dtype each means."""


def load_hf_config(path: str | Path) -> ModelSpec:
    """Read a GPT-2 or LLaMA Hugging Face `config.json` (by `model_type`, else by the keys present), checked
    by `hf_architecture` as the runtime checks it."""
    path = Path(path)
    try:
        text = input_files.read_text(path, f"model config {str(path)!r}", "utf-8-sig")
        cfg = typed_json.loads_checked(text, f"model config {str(path)!r}")
    except FileNotFoundError:
        raise UserInputError(f"model config {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserInputError(f"model config {str(path)!r} cannot be read ({type(err).__name__})") from None
    if not isinstance(cfg, dict):
        raise UserInputError(f"model config {str(path)!r} must hold a JSON object")
    where = f"model config {str(path)!r}"
    arch = hf_architecture(cfg, where)
    key = "torch_dtype" if cfg.get("torch_dtype") is not None else "dtype"
    dtype = HF_DTYPES[str_field(cfg, key, where, default="bfloat16", allowed=tuple(HF_DTYPES))]
    rope = arch["rope_theta"] > 0
    return ModelSpec(
        name=path.stem if path.stem != "config" else path.parent.name or "config",
        hidden=arch["hidden"], heads=arch["heads"], kv_heads=arch["kv_heads"], layers=arch["layers"],
        ffn_hidden=arch["ffn_hidden"] or 4 * arch["hidden"], ffn_kind=arch["ffn_kind"], norm=arch["norm"],
        norm_eps=arch["eps"], bias=arch["bias"], qkv_bias=arch["qkv_bias"], vocab_size=arch["vocab_size"],
        max_positions=0 if rope else arch["max_positions"], tied=arch["tied"], rope_theta=arch["rope_theta"],
        rope_llama3=arch["rope_llama3"], dtype=dtype, source=str(path),
    )
