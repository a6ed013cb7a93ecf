"""Hugging Face model folders in: each rank reads only its slices of the safetensors (the way out, a full state
dict back to a folder `from_pretrained` loads, is `export`'s, by the same map).

Library module (no command; `train --init-from DIR` and `paradyse-lab export-hf` use it). A folder holds
config.json and either one `model.safetensors` or shards named by `model.safetensors.index.json`'s
`weight_map`. Accepted architectures: those `convert` knows (GPT-2, LLaMA, Mistral, Qwen2).

The map (`tensor_sources`) says, for every runtime tensor, which rows of which Hugging Face tensors it is
made of, in the runtime's orientation ([out, in] for w1, (in, out) for w2: hf_convert.py's
`hf_to_state_dict` and `llama_to_state_dict` spell the same conversion for full tensors). A sharded runtime
tensor (w1, b1, w2 of a sub-layer) is cut as `weight_shards` cuts it: block r of p of each row section
(q | k | v, gate | up), so rank r reads, with safetensors' `get_slice`, rows r*n/p..(r+1)*n/p of each section's source
(columns when the source is stored transposed, e.g. LLaMA's o_proj [out, in] is w2 (in, out)); replicated
tensors (embeddings, norms, head) are read whole. No rank reads another rank's rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from paradyse_lab.core.model_spec import get_model
from paradyse_lab.errors import UserInputError
from paradyse_lab.files import input_files
from paradyse_lab.runtime.model.reference import GPTConfig
from paradyse_lab.runtime.model.vocab_parallel import vocab_range
from paradyse_lab.runtime.model.weight_shards import SHARDED, VOCAB_ROWS

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
PREFIXES = ("model.", "transformer.")
"""Prefixes of the base model's tensors in a causal-LM folder (LLaMA's `model.`, GPT-2's `transformer.`);
the names below are without them (older GPT-2 folders store them so)."""


@dataclass(frozen=True)
class Source:
    """Rows `start`..`stop` (runtime orientation) of the Hugging Face tensor `name`; `transposed`: the file
    stores it the other way round, so these are its columns."""

    name: str
    start: int
    stop: int
    transposed: bool = False


def _whole(name: str, rows: int, transposed: bool = False) -> list[Source]:
    return [Source(name, 0, rows, transposed)]


def _sections(name: str, sizes: tuple[int, ...], transposed: bool = False) -> list[Source]:
    """Consecutive row sections of one tensor (GPT-2's c_attn holds q | k | v)."""
    out, start = [], 0
    for n in sizes:
        out.append(Source(name, start, start + n, transposed))
        start += n
    return out


def _gpt2_layer(cfg, layer: int) -> dict[str, list[Source]]:
    """GPT-2's Conv1D stores [in, out]: w1 = c_attn / c_fc transposed, w2 = c_proj as stored."""
    h, f, pre = cfg.hidden, cfg.ffn_hidden, f"h.{layer}."
    out = {}
    for ours, ln, first, second, n1 in (("attn", "ln_1", "attn.c_attn", "attn.c_proj", (h, h, h)),
                                        ("mlp", "ln_2", "mlp.c_fc", "mlp.c_proj", (f,))):
        dst, n2 = f"layers.{layer}.{ours}.", h if ours == "attn" else f
        out[dst + "ln_w"], out[dst + "ln_b"] = _whole(pre + ln + ".weight", h), _whole(pre + ln + ".bias", h)
        out[dst + "w1"] = _sections(pre + first + ".weight", n1, transposed=True)
        out[dst + "b1"] = _sections(pre + first + ".bias", n1)
        out[dst + "w2"] = _whole(pre + second + ".weight", n2)
        out[dst + "b2"] = _whole(pre + second + ".bias", h)
    return out


def _llama_layer(cfg, layer: int) -> dict[str, list[Source]]:
    """LLaMA's nn.Linear stores [out, in]: w1 = cat(q, k, v) or cat(gate, up) as stored, w2 = o_proj /
    down_proj transposed; biases per `cfg.bias` (every linear layer) and `cfg.qkv_bias` (Qwen2's q, k, v)."""
    h, kv, f, pre = cfg.hidden, cfg.kv_hidden, cfg.ffn_hidden, f"layers.{layer}."
    attn = [(f"{pre}self_attn.{x}_proj", n) for x, n in (("q", h), ("k", kv), ("v", kv))]
    mlp = [(f"{pre}mlp.{x}_proj", f) for x in ("gate", "up")]
    dst_a, dst_m = f"layers.{layer}.attn.", f"layers.{layer}.mlp."
    out = {dst_a + "ln_w": _whole(pre + "input_layernorm.weight", h), dst_a + "ln_b": [],
           dst_a + "w1": [Source(n + ".weight", 0, rows) for n, rows in attn],
           dst_a + "b1": [Source(n + ".bias", 0, rows) for n, rows in attn] if cfg.bias or cfg.qkv_bias else [],
           dst_a + "w2": _whole(pre + "self_attn.o_proj.weight", h, transposed=True),
           dst_a + "b2": _whole(pre + "self_attn.o_proj.bias", h) if cfg.bias else [],
           dst_m + "ln_w": _whole(pre + "post_attention_layernorm.weight", h), dst_m + "ln_b": [],
           dst_m + "w1": [Source(n + ".weight", 0, rows) for n, rows in mlp],
           dst_m + "b1": [Source(n + ".bias", 0, rows) for n, rows in mlp] if cfg.bias else [],
           dst_m + "w2": _whole(pre + "mlp.down_proj.weight", f, transposed=True),
           dst_m + "b2": _whole(pre + "mlp.down_proj.bias", h) if cfg.bias else []}
    return out


def tensor_sources(cfg) -> dict[str, list[Source]]:
    """Every runtime tensor of the model `cfg` (a `GPTConfig`): the Hugging Face rows it is made of, in
    order (an empty list: a [0]-sized tensor the architecture does not have, e.g. RMSNorm's bias)."""
    v, h = cfg.vocab_size, cfg.hidden
    if cfg.rope:
        out = {"wte": _whole("embed_tokens.weight", v), "wpe": [], "lnf_w": _whole("norm.weight", h), "lnf_b": []}
        layer = _llama_layer
    else:
        out = {"wte": _whole("wte.weight", v), "wpe": _whole("wpe.weight", cfg.max_positions),
               "lnf_w": _whole("ln_f.weight", h), "lnf_b": _whole("ln_f.bias", h)}
        layer = _gpt2_layer
    if not cfg.tied:
        out["head"] = _whole("lm_head.weight", v)
    for index in range(cfg.layers):
        out.update(layer(cfg, index))
    return out


def rank_rows(key: str, sources: list[Source], rank: int, p: int) -> list[Source]:
    """The rows of `sources` rank `rank` of `p` holds of runtime tensor `key`: block `rank` of each section
    for a sharded tensor, all of them otherwise."""
    if key.rpartition(".")[2] not in SHARDED or not key.startswith("layers."):
        return sources
    out = []
    for src in sources:
        n = (src.stop - src.start) // p
        out.append(Source(src.name, src.start + rank * n, src.start + (rank + 1) * n, src.transposed))
    return out


IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq")
"""Tensors a folder may hold that are no weights (older GPT-2 files store the causal mask, older LLaMA files the
rotary frequencies): not read, and not refused as tensors the config does not describe."""


def _open_safetensors(path: Path):
    """safetensors' `safe_open` of `path`, or a one-line `UserInputError` naming it when it is not a readable
    safetensors file (truncated, empty, a header too large or not JSON, not a regular file)."""
    from safetensors import SafetensorError

    if not path.is_file():
        raise UserInputError(f"--init-from: {path} is not a file")
    try:
        return safe_open(path, framework="pt")
    except (SafetensorError, OSError, ValueError) as err:
        raise UserInputError(f"--init-from: {path} is not a readable safetensors file "
                             f"({' '.join(str(err).split())[:160]})") from None


def _weight_map(index: Path) -> dict[str, str]:
    """The index's `weight_map`, checked: a JSON object of tensor names to file names, each file inside the
    folder (no absolute path, no `..`); a one-line `UserInputError` otherwise."""
    from paradyse_lab.files.typed_json import loads_checked

    try:
        text = input_files.read_text(index, f"--init-from: {index}", "utf-8-sig")
    except (OSError, UnicodeDecodeError) as err:
        raise UserInputError(f"--init-from: {index} cannot be read ({getattr(err, 'strerror', None) or err})") from None
    data = loads_checked(text, f"--init-from: {index}")
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise UserInputError(f"--init-from: {index} is damaged (its weight_map must be a JSON object of tensor names "
                             "to file names)")
    for name, file in weight_map.items():
        if not isinstance(file, str) or not file:
            raise UserInputError(f"--init-from: {index}: weight_map[{name!r}] must be a file name, got "
                                 f"{json.dumps(file)[:80]}")
        if Path(file).is_absolute() or ".." in Path(file).parts:
            raise UserInputError(f"--init-from: {index}: weight_map[{name!r}] = {file!r} leaves the folder (a file "
                                 "name inside it is expected)")
    return weight_map


def weight_files(folder: str | Path) -> list[str]:
    """The names of the files that hold a Hugging Face folder's weights: its shard index and every shard it
    names, or its single safetensors file (none when it holds neither)."""
    folder = Path(folder)
    if (folder / INDEX_FILE).exists():
        return [INDEX_FILE, *sorted(set(_weight_map(folder / INDEX_FILE).values()))]
    return [SINGLE_FILE] if (folder / SINGLE_FILE).exists() else []


class SafetensorsFolder:
    """The safetensors of a Hugging Face model folder, read by slices (files opened once, lazily)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        index = self.folder / INDEX_FILE
        self._open: dict[str, object] = {}
        if index.exists():
            weight_map = _weight_map(index)
        elif (self.folder / SINGLE_FILE).exists():
            self._open[SINGLE_FILE] = _open_safetensors(self.folder / SINGLE_FILE)
            weight_map = dict.fromkeys(self._open[SINGLE_FILE].keys(), SINGLE_FILE)
        else:
            raise UserInputError(f"--init-from {str(self.folder)!r} holds no {SINGLE_FILE} nor {INDEX_FILE} "
                                 "(save the model with safetensors: save_pretrained's default)")
        self.files = {_strip(name): (name, file) for name, file in weight_map.items()}

    def _slice(self, name: str):
        if name not in self.files:
            raise UserInputError(f"--init-from {str(self.folder)!r}: tensor {name!r} is missing from the "
                                 "safetensors (is the folder the model config.json describes?)")
        full_name, file = self.files[name]
        if file not in self._open:
            self._open[file] = _open_safetensors(self.folder / file)
        try:
            return self._open[file].get_slice(full_name)
        except Exception:  # noqa: BLE001 - safetensors raises a bare SafetensorError for a name not in the file
            raise UserInputError(f"--init-from: {self.folder / file} holds no tensor {full_name!r}, which the "
                                 f"index places there") from None

    def check_shapes(self, cfg) -> None:
        """Every tensor the model `cfg` is made of has exactly the length the config gives it along the dimension
        read by rows (a longer one was read in part: a model cut without a word), and the folder holds no weight
        the config does not describe (a layer beyond its layers); a one-line `UserInputError` otherwise. Reads
        the files' headers only."""
        needed: dict[str, tuple[int, bool]] = {}
        for sources in tensor_sources(cfg).values():
            for src in sources:
                needed[src.name] = (max(src.stop, needed.get(src.name, (0, False))[0]), src.transposed)
        for name, (extent, transposed) in needed.items():
            shape = list(self._slice(name).get_shape())
            if (transposed and len(shape) != 2) or not shape or (shape[1] if transposed else shape[0]) != extent:
                axis = "columns" if transposed else "rows"
                raise UserInputError(f"--init-from {str(self.folder)!r}: tensor {name!r} has shape {shape}; the "
                                     f"model of config.json needs exactly {extent} {axis} (config.json and "
                                     "the weights disagree)")
        extra = sorted(n for n in self.files if n not in needed and not n.endswith(IGNORED_SUFFIXES)
                       and not (cfg.tied and n == "lm_head.weight"))
        if extra:
            raise UserInputError(f"--init-from {str(self.folder)!r}: the safetensors hold {len(extra)} tensor(s) the "
                                 f"model of config.json has no place for (first {self.files[extra[0]][0]!r}): "
                                 "config.json and the weights disagree (fewer layers in the config?)")

    def read(self, src: Source) -> torch.Tensor:
        """Rows `src.start`..`src.stop` of `src.name` in the runtime's orientation, fp32: [rows, ...]."""
        part = self._slice(src.name)
        shape = part.get_shape()
        extent = shape[1] if src.transposed else shape[0]
        if src.stop > extent or (src.transposed and len(shape) != 2):
            raise UserInputError(f"--init-from: tensor {src.name!r} has shape {list(shape)}; the model config "
                                 f"needs {src.stop} {'columns' if src.transposed else 'rows'}")
        if src.transposed:
            return part[:, src.start:src.stop].t().float()  # [in, out] slice [:, a:b] -> rows [b - a, in]
        return part[src.start:src.stop].float()

    def close(self) -> None:
        """Close the files opened so far."""
        for handle in self._open.values():
            handle.__exit__(None, None, None)
        self._open.clear()


def check_folder(folder: str | Path, cfg) -> None:
    """`SafetensorsFolder.check_shapes` of `folder` for the model `cfg`: the launcher's check, before any rank
    starts (every rank checks again as it reads)."""
    files = SafetensorsFolder(folder)
    try:
        files.check_shapes(cfg)
    finally:
        files.close()


def _strip(name: str) -> str:
    for prefix in PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def vocab_rank_rows(sources: list[Source], vocab: int, rank: int, p: int) -> list[Source]:
    """The vocabulary rows rank `rank` of `p` holds of the embedding or head under the vocabulary-parallel layout
    (its padding rows are not read)."""
    start, stop = vocab_range(vocab, p, rank)
    return [Source(src.name, start, stop, src.transposed) for src in sources]


def read_rank_state_dict(folder: str | Path, cfg, rank: int, p: int, like: dict[str, torch.Tensor],
                         vocab_parallel: bool = False) -> dict[str, torch.Tensor]:
    """Rank `rank`'s shard of every runtime tensor, read from the folder's safetensors by slices; `like`
    (this rank's state dict, for the shapes) checks what was read: a `UserInputError` names a tensor whose
    shape does not match the config. `vocab_parallel`: the embedding and head as vocabulary rows (padded)."""
    files = SafetensorsFolder(folder)
    out = {}
    try:
        files.check_shapes(cfg)
        for key, sources in tensor_sources(cfg).items():
            if vocab_parallel and key in VOCAB_ROWS:
                real = torch.cat([files.read(src) for src in vocab_rank_rows(sources, cfg.vocab_size, rank, p)])
                pad = real.new_zeros((like[key].shape[0] - real.shape[0], *real.shape[1:]))
                parts = [torch.cat([real, pad])]
            else:
                parts = [files.read(src) for src in rank_rows(key, sources, rank, p)]
            value = torch.cat(parts) if parts else torch.zeros_like(like[key])  # sections stacked: [n/p, ...]
            if value.shape != like[key].shape:
                names = ", ".join(dict.fromkeys(s.name for s in sources))
                raise UserInputError(f"--init-from: {names} give {key} the shape {list(value.shape)}; the config "
                                     f"needs {list(like[key].shape)}")
            out[key] = value.contiguous()
    finally:
        files.close()
    return out


def read_config(folder: str | Path, field: str = "--init-from") -> dict:
    """The folder's config.json as a dict (a one-line `UserInputError` when missing or damaged)."""
    path = Path(folder) / "config.json"
    if not Path(folder).is_dir():
        raise UserInputError(f"{field} {str(folder)!r} is not a folder (give a Hugging Face model folder)")
    try:
        config = json.loads(input_files.read_text(path, f"{field}: {path}", "utf-8-sig"))
    except UserInputError:
        raise
    except FileNotFoundError:
        raise UserInputError(f"{field} {str(folder)!r} has no config.json") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):  # ValueError: JSONDecodeError, 4,300+ digits
        raise UserInputError(f"{field}: {path} is not valid JSON") from None
    if not isinstance(config, dict):
        raise UserInputError(f"{field}: {path} must hold a JSON object")
    return config


def model_source(model: str, init_from: str) -> str:
    """What `train` builds the model from: `model` (a preset or a config.json), or, when only `init_from` is
    given, that folder's config.json. Both given must describe the same shapes (a one-line error otherwise);
    neither is an error."""
    if not init_from:
        if not model:
            raise UserInputError("--model is required (a preset or a config.json) unless --init-from names a "
                                 "Hugging Face model folder")
        return model
    read_config(init_from)  # the folder and its config.json exist and parse
    folder_config = str(Path(init_from) / "config.json")
    if model:
        given, found = (GPTConfig.from_model_spec(get_model(m)) for m in (model, folder_config))
        if given != found:
            diff = ", ".join(f"{k} {getattr(given, k)} vs {getattr(found, k)}" for k in given.__dataclass_fields__
                             if getattr(given, k) != getattr(found, k))
            raise UserInputError(f"--model {model!r} is not the model of --init-from {init_from!r} ({diff}); "
                                 "leave --model out to use the folder's config.json")
    return folder_config
