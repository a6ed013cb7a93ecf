"""What a checkpoint's model and data are, by content: a resumed run continues only the model and data that wrote
the checkpoint, whatever names it gives them.

The model is its architecture (the recorded `ModelSpec` fields: layers, hidden, heads, K/V heads, MLP width, vocabulary,
positions, epsilon, rotary settings, norm, ...), not the `--model` string: `gpt2-tiny` and a config.json of the
same shapes are one model, and two config.json files at one path with another epsilon are two. A dataset that
names a file or folder (`file:d.jsonl`, a length file, a text dataset) is the SHA-256 of its content, not its
path: `./d.jsonl` and `d.jsonl` are one dataset, and a token file replaced at the same path is another. Named
workloads (`uniform:8:16`, `grch38`) are their names. The `--init-from` folder is the SHA-256 of its weight
files' content (its safetensors, and its shard index), not its path: `./hf` and `hf` are one folder, and
other weights at the same path are others. Checkpoints written before these were recorded are compared by the
strings, as they were.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from paradyse_lab.errors import UserInputError
from paradyse_lab.results.result_key import file_digest
from paradyse_lab.runtime.checkpoints.architecture import architecture_record
from paradyse_lab.runtime.hf.weights import weight_files

OPTIONAL_SETTINGS = {"tokenizer": "", "text_column": "text", "data_order": "", "accumulate": 1,
                     "lr_schedule": "constant", "warmup_steps": 0, "clip_grad": 0.0, "global_batch": 0,
                     "long_documents": "cut"}
"""Settings a resumed run must keep that checkpoints of earlier versions do not record, each with the value those
checkpoints were written with (the default of its `paradyse-lab train` option then): a checkpoint without one
is compared as if it recorded that value."""


IDENTITY_KEYS = ("architecture", "dataset_digest", "init_from_digest")
"""meta.json keys of the content a resumed run must keep (`identity`)."""


def architecture_of(cfg) -> dict:
    """The model's recorded `ModelSpec` fields as meta.json holds them (tuples as lists: the JSON round trip)."""
    return json.loads(json.dumps(architecture_record(cfg)))


def dataset_digest(dataset: str) -> str | None:
    """SHA-256 over the content of the file or folder `dataset` names (a `file:` prefix removed; a folder: every
    file under it, by relative path and content, hidden entries skipped as the readers skip them); None for a
    named workload that is no path."""
    path = Path(dataset.removeprefix("file:")) if dataset else None
    if path is None or not path.exists():
        return None
    if path.is_file():
        return file_digest(path)
    h = hashlib.sha256()
    for folder, subfolders, names in os.walk(path):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
        for name in sorted(n for n in names if not n.startswith(".")):
            f = Path(folder) / name
            h.update(f"{f.relative_to(path)}\0{file_digest(f)}\n".encode())
    return h.hexdigest()


def init_from_digest(init_from: str) -> str | None:
    """SHA-256 over the weight files of the `--init-from` folder (by name and content: every shard is read
    whole, exact where the safetensors headers alone would miss weights of the same shapes); None without one."""
    if not init_from:
        return None
    h = hashlib.sha256()
    for name in weight_files(init_from):
        h.update(f"{name}\0{file_digest(Path(init_from) / name)}\n".encode())
    return h.hexdigest()


def identity(opts, cfg) -> dict:
    """The meta.json entries of the run's model, data and initial weights by content (module docstring)."""
    return {"architecture": architecture_of(cfg), "dataset_digest": dataset_digest(opts.dataset),
            "init_from_digest": init_from_digest(opts.init_from)}


def compared_by_content(saved: dict, expected: dict) -> set[str]:
    """The settings whose string is not compared because their content is: `model` when both record the
    architecture, `dataset` when both record the data's digest, `init_from` when both record its weights'."""
    keys = set()
    if saved.get("init_from_digest") and expected.get("init_from_digest"):
        keys.add("init_from")
    if saved.get("architecture") and expected.get("architecture"):
        keys.add("model")
    if saved.get("dataset_digest") and expected.get("dataset_digest"):
        keys.add("dataset")
    return keys


def check_identity(path: Path, saved: dict, expected: dict) -> None:
    """A one-line `UserInputError` when checkpoint `path` (its meta.json `saved`) was written by another model
    or on other data than this run's (`expected`, from `identity`)."""
    arch, want = saved.get("architecture"), expected.get("architecture")
    if isinstance(arch, dict) and want:
        unknown = sorted(set(arch) - set(want))
        if unknown:
            raise UserInputError(f"checkpoint {path} records architecture fields this version of paradyse-lab does "
                                 f"not know ({', '.join(unknown)}): it was written by another version; use that "
                                 "version, or start a new --checkpoint-dir")
        for field, value in want.items():
            if arch.get(field) != value:
                raise UserInputError(f"checkpoint {path} was written by another model: its {field} is "
                                     f"{arch.get(field)!r}, this run's (--model {expected.get('model')!r}) "
                                     f"{value!r}; resume with the model that wrote it, or start a new "
                                     "--checkpoint-dir")
    _check_digest(path, saved, expected, "init_from", "was started from other weights", "those weights")
    _check_digest(path, saved, expected, "dataset", "was trained on other data", "that data")


def _check_digest(path: Path, saved: dict, expected: dict, key: str, what: str, keep: str) -> None:
    """A one-line `UserInputError` when checkpoint `path` recorded another `{key}_digest` than this run's: the
    `--{key}` option names other content than it did."""
    digest, want = saved.get(f"{key}_digest"), expected.get(f"{key}_digest")
    if digest and want and digest != want:
        raise UserInputError(f"checkpoint {path} {what}: --{key.replace('_', '-')} {expected.get(key)!r} does not "
                             f"hold what {saved.get(key)!r} held when it was written (SHA-256 {want[:12]}... vs "
                             f"{digest[:12]}...); resume with {keep}, or start a new --checkpoint-dir")
