"""A training checkpoint (any world size) as a Hugging Face model folder.

Library module; the command is `paradyse-lab export-hf --checkpoint DIR --out HF_DIR`. The folder holds config.json
(the config of the folder the run
started from with --init-from, else one built from the model's shapes: `hf_config`) and the
weights as fp32 safetensors: one `model.safetensors`, or, above `max_shard_bytes`, shards
`model-0000K-of-0000N.safetensors` with `model.safetensors.index.json` (transformers' names and index format).
transformers' `from_pretrained(HF_DIR)` loads it. The folder appears whole or not at all: it is written
beside its target (`.HF_DIR.tmp-*`) and renamed; an existing non-empty HF_DIR is never written over.
The tensors (`to_hf_state_dict`) are the inverse of `train --init-from`'s read: `weights`' map
(`tensor_sources`) says which rows of which Hugging Face tensor each runtime tensor is made of.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import tempfile
import threading
from pathlib import Path

import torch
from safetensors.torch import save_file

from paradyse_lab.errors import RunStopped, UserInputError
from paradyse_lab.files.atomic_write import _umask
from paradyse_lab.runtime.checkpoints.dcp import config_of, read_full
from paradyse_lab.runtime.checkpoints.folder import checkpoints
from paradyse_lab.runtime.hf.weights import Source, tensor_sources
from paradyse_lab.runtime.model.reference import GPTConfig

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "merges.txt", "tokenizer.model", "vocab.txt", "generation_config.json")
"""The files of a Hugging Face folder besides its config and weights that `from_pretrained` of the tokenizer
(and `generate`'s defaults) read: copied from the folder the run started from into the export."""
SIZE_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_size(text: str, field: str = "--max-shard-size") -> int:
    """Bytes of a size such as '5GB', '200MB', '20KiB' or '1000' (transformers' `max_shard_size` spelling)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]I?B|B)?\s*", str(text).upper(), re.ASCII)
    if not match or float(match.group(1)) <= 0:
        raise UserInputError(f"{field} must be a positive size such as 5GB, 200MB or 20KB, got {text!r}")
    return int(float(match.group(1)) * SIZE_UNITS[match.group(2) or "B"])


def find_checkpoint(path: str | Path) -> Path:
    """The checkpoint `path` names: a `step-*` folder, or the newest verifying one in a --checkpoint-dir."""
    path = Path(path)
    if (path / "meta.json").is_file():
        return path
    found = checkpoints(path)
    if not path.is_dir() or not found:
        raise UserInputError(f"--checkpoint {str(path)!r} is neither a checkpoint (a step-* folder with meta.json) "
                             "nor a --checkpoint-dir holding any")
    return found[0]


def _checkpoint_folder(folder: Path) -> bool:
    """Whether `folder` is a training checkpoint (meta.json beside DCP's .metadata) or a --checkpoint-dir (a
    checkpoint among its `step-*` folders, or the `latest` marker naming one)."""
    if (folder / "meta.json").is_file() and (folder / ".metadata").is_file():
        return True
    if (folder / "latest").is_file() and re.fullmatch(r"step-\d+\s*", (folder / "latest").read_text(errors="replace")):
        return True
    return any((step / "meta.json").is_file() for step in checkpoints(folder))


def refuse_out_inside_checkpoints(out: Path, checkpoint: Path) -> None:
    """`UserInputError` when --out is the checkpoint read, lies inside it, or inside any checkpoint folder: a
    resumed run owns its folder and could publish a checkpoint of the same name over the export."""
    target = out.resolve()
    source = checkpoint.resolve()
    if target == source or source in target.parents:
        raise UserInputError(f"--out {str(out)!r} lies inside --checkpoint {str(checkpoint)!r}; write the Hugging "
                             "Face folder outside it")
    for folder in (target, *target.parents):
        if folder.is_dir() and _checkpoint_folder(folder):
            raise UserInputError(f"--out {str(out)!r} lies inside the checkpoint folder {str(folder)!r}, which "
                                 "training runs write and clean; write the Hugging Face folder outside it")


def shard_groups(tensors: dict[str, torch.Tensor], max_bytes: int) -> list[list[str]]:
    """Tensor names in order, cut into files of at most `max_bytes` (a larger tensor gets a file of its own)."""
    groups, size = [[]], 0
    for name, value in tensors.items():
        nbytes = value.numel() * value.element_size()
        if groups[-1] and size + nbytes > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += nbytes
    return groups


def write_safetensors(tensors: dict[str, torch.Tensor], folder: Path, max_bytes: int) -> list[str]:
    """The tensors as one model.safetensors or as shards with their index; returns the file names."""
    groups = shard_groups(tensors, max_bytes)
    if len(groups) == 1:
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
        return ["model.safetensors"]
    names, weight_map = [], {}
    for k, group in enumerate(groups, 1):
        name = f"model-{k:05d}-of-{len(groups):05d}.safetensors"
        save_file({n: tensors[n] for n in group}, folder / name, metadata={"format": "pt"})
        names.append(name)
        weight_map.update(dict.fromkeys(group, name))
    total = sum(v.numel() * v.element_size() for v in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return names + ["model.safetensors.index.json"]


def to_hf_state_dict(full: dict[str, torch.Tensor], cfg) -> dict[str, torch.Tensor]:
    """The inverse of the read: a full runtime state dict (every rank's shards joined,
    weight_shards.gather_state_dict) as a Hugging Face causal LM's tensors (`model.` / `transformer.` names,
    `lm_head.weight` only when untied)."""
    rows: dict[str, list[tuple[Source, torch.Tensor]]] = {}
    for key, sources in tensor_sources(cfg).items():
        offset = 0
        for src in sources:
            n = src.stop - src.start
            rows.setdefault(src.name, []).append((src, full[key][offset:offset + n]))  # [n, ...] of [N, ...]
            offset += n
    prefix = "model." if cfg.rope else "transformer."
    out = {}
    for name, parts in rows.items():
        height = max(src.stop for src, _ in parts)
        value = torch.empty((height, *parts[0][1].shape[1:]), dtype=parts[0][1].dtype)  # runtime orientation
        for src, block in parts:
            value[src.start:src.stop] = block
        transposed = parts[0][0].transposed
        out[name if name == "lm_head.weight" else prefix + name] = (value.t() if transposed else value).contiguous()
    return out


def hf_config(cfg, original: dict | None = None) -> dict:
    """A config.json transformers builds the model `cfg` from: `original` (the folder a run started from)
    when given, else a `GPT2LMHeadModel` (learned positions) or a `LlamaForCausalLM` (`Qwen2ForCausalLM`
    with q, k, v biases only) of these shapes."""
    if original is not None:
        return dict(original)
    common = {"vocab_size": cfg.vocab_size, "torch_dtype": "float32", "tie_word_embeddings": cfg.tied}
    if not cfg.rope:
        return {**common, "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": cfg.hidden,
                "n_head": cfg.heads, "n_layer": cfg.layers, "n_positions": cfg.max_positions,
                "n_inner": cfg.ffn_hidden, "layer_norm_epsilon": cfg.eps, "activation_function": "gelu_new"}
    qwen = cfg.qkv_bias and not cfg.bias
    rope = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_llama3 is not None:
        factor, low, high, original_max = cfg.rope_llama3
        rope = {"rope_type": "llama3", "rope_theta": cfg.rope_theta, "factor": factor, "low_freq_factor": low,
                "high_freq_factor": high, "original_max_position_embeddings": original_max}
    out = {**common, "model_type": "qwen2" if qwen else "llama",
           "architectures": ["Qwen2ForCausalLM" if qwen else "LlamaForCausalLM"], "hidden_size": cfg.hidden,
           "num_attention_heads": cfg.heads, "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_dim,
           "num_hidden_layers": cfg.layers, "intermediate_size": cfg.ffn_hidden, "rms_norm_eps": cfg.eps,
           "hidden_act": "silu",
           "max_position_embeddings": cfg.max_positions or 131072,  # 0 (no limit here): Llama 3.1's context
           "rope_theta": cfg.rope_theta, "rope_scaling": rope if cfg.rope_llama3 else None, "rope_parameters": rope}
    if not qwen:
        out.update(attention_bias=cfg.bias, mlp_bias=cfg.bias)
    return out


def _copy_tokenizer(folder: str | None, tmp: Path) -> list[str]:
    """Copy the `TOKENIZER_FILES` the run's source folder holds (none when it is gone, or the model was a
    preset); returns their names."""
    if not folder or not Path(folder).is_dir():
        return []
    copied = []
    for name in TOKENIZER_FILES:
        if (Path(folder) / name).is_file():
            shutil.copyfile(Path(folder) / name, tmp / name)
            copied.append(name)
    return copied


@contextlib.contextmanager
def _removed_on_sigterm():
    """While the block runs, SIGTERM raises `RunStopped` (in the main thread), so that the temporary folder is
    removed on the way out as for any other error, instead of staying behind a process the signal ended."""
    def stop(signum, frame):
        raise RunStopped("export-hf was stopped by SIGTERM; its partial folder is removed")

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def export_hf(checkpoint: str | Path, out: str | Path, max_shard_bytes: int = 5 * 10**9) -> dict:
    """Write the Hugging Face folder `out` from `checkpoint` (module docstring); returns what was written."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserInputError(f"--out {str(out)!r} exists and is not an empty folder; choose a new one")
    path = find_checkpoint(checkpoint)
    refuse_out_inside_checkpoints(out, Path(checkpoint))
    full, meta = read_full(path)
    cfg = config_of(meta, GPTConfig)
    tensors = to_hf_state_dict(full, cfg)
    config = {**hf_config(cfg, meta.get("hf_config")), "dtype": "float32", "torch_dtype": "float32"}
    out.parent.mkdir(parents=True, exist_ok=True)
    with _removed_on_sigterm():
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
        try:
            files = write_safetensors(tensors, tmp, max_shard_bytes)
            (tmp / "config.json").write_text(json.dumps(config, indent=2))
            files += _copy_tokenizer(meta.get("hf_folder"), tmp)
            mode = 0o666 & ~_umask()  # safetensors writes its files 0600 whatever the umask
            for f in tmp.iterdir():
                os.chmod(f, mode)
            os.chmod(tmp, 0o777 & ~_umask())
            if out.exists():
                out.rmdir()  # empty (checked above)
            os.replace(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return {"checkpoint": str(path), "step": meta["step"], "world_size": meta["world_size"], "out": str(out),
            "files": ["config.json", *files], "tensors": len(tensors)}
