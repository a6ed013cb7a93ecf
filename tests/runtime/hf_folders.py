"""Small random transformers models saved as Hugging Face folders (built locally, no download), for the
--init-from, export-hf and API tests. Sizes split over p = 1..4: hidden 32, 4 heads, LLaMA's 2 K/V heads
(K/V width 16), MLP 48 (LLaMA) or 128 (GPT-2), 2 layers, vocab 64, 64 positions."""

from __future__ import annotations

from pathlib import Path

import torch

SHARD_SIZE = "20KB"
"""A shard size well under the models' ~100 KB, so `save_pretrained` writes several files and an index."""


def build(kind: str, seed: int = 0):
    """A random fp32 `LlamaForCausalLM` ('llama', untied head, GQA; 'llama-biases-tied'), `MistralForCausalLM`,
    `Qwen2ForCausalLM` or `GPT2LMHeadModel` ('gpt2'), eval mode,
    its norms and biases perturbed so that no tensor is at its trivial initial value."""
    import transformers

    torch.manual_seed(seed)
    shapes = dict(vocab_size=64, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=48,
                  num_hidden_layers=2, max_position_embeddings=64, rms_norm_eps=1e-6)
    if kind == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**shapes, tie_word_embeddings=False))
    elif kind == "llama-biases-tied":  # biases on every linear layer, head tied to the embedding
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            **shapes, attention_bias=True, mlp_bias=True, tie_word_embeddings=True))
    elif kind == "mistral":
        model = transformers.MistralForCausalLM(transformers.MistralConfig(**shapes, sliding_window=None))
    elif kind == "qwen2":  # biases on q, k, v only
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**shapes, tie_word_embeddings=False))
    else:
        config = transformers.GPT2Config(vocab_size=64, n_embd=32, n_head=4, n_layer=2, n_positions=64,
                                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(config)
    with torch.no_grad():
        for name, value in model.named_parameters():
            if "norm" in name or "ln_" in name or name.endswith(".bias"):
                value.add_(0.1 * torch.randn_like(value))
    return model.float().eval()


def save(model, folder: Path, sharded: bool) -> Path:
    """`save_pretrained` into `folder` (safetensors; several files and an index when `sharded`)."""
    model.save_pretrained(folder, max_shard_size=SHARD_SIZE if sharded else "10GB")
    files = list(folder.glob("*.safetensors"))
    assert (len(files) > 1) == sharded and (folder / "model.safetensors.index.json").is_file() == sharded, files
    return folder


def hf_loss(model, tokens: torch.Tensor) -> float:
    """transformers' mean next-token loss on `tokens` [b, s] (the last position has no target)."""
    with torch.no_grad():
        return float(model(input_ids=tokens, labels=tokens).loss)
