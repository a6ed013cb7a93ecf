"""Training checkpoints through torch.distributed.checkpoint (DCP): written at p ranks, resumed at any p'.

Library module (no command; `TrainState` writes and reads them, `paradyse-lab export-hf`
reads them).
Layout under DIR:

    DIR/step-000120/.metadata, __R_0.distcp ...   DCP's files: every tensor as chunks of its global shape
    DIR/step-000120/meta.json                      run settings, step, world size, model shapes, SHA-256 of
                                                   every DCP file
    DIR/latest                                     the name of the newest complete checkpoint

What is saved: every trained tensor and AdamW's two moments of each, as global tensors
(a sub-layer's sharded matrices are one DCP tensor per row section), so DCP reshards them for whatever world size
loads them. At p = 1 no process group is needed (`read_full` also reads a checkpoint without one: export-hf).

Guarantees (as the per-rank format of earlier versions):
atomic (DCP writes into `DIR/.tmp-step-N`; rank 0 records every file's SHA-256 in meta.json, renames the folder
and replaces `latest`; a crash leaves the previous checkpoint named, and a failed write on any rank, a full
disk, stops every rank with one line and removes the partial folder), verified before use (`resumable` takes the
newest checkpoint whose files match their hashes, the ranks agreeing; damaged ones are skipped with a note),
never written over (`checkpoint.refuse_overwrite`), and the settings check (another model, seed, lr, ...
is a `UserInputError`). The world size is recorded, not required.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint import load as dcp_load
from torch.distributed.checkpoint import save as dcp_save
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.errors import RunStopped, UserInputError
from paradyse_lab.files.typed_json import written
from paradyse_lab.results.result_key import file_digest
from paradyse_lab.runtime.checkpoints import dcp_entries
from paradyse_lab.runtime.checkpoints.architecture import (
    RECORD_KEYS,
    REQUIRED_KEYS,
    architecture_record,
    spec_of_record,
)
from paradyse_lab.runtime.checkpoints.folder import (
    _agreed_failure,
    _all_true,
    _barrier,
    _replace_text,
    checkpoints,
    read_meta,
)
from paradyse_lab.runtime.checkpoints.layout import FORMAT, LAYOUT, check_layout
from paradyse_lab.runtime.checkpoints.resume_identity import (
    IDENTITY_KEYS,
    OPTIONAL_SETTINGS,
    check_identity,
    compared_by_content,
)
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.hf.weights import read_config
from paradyse_lab.runtime.model.reference import GPTParams


def _process_group(group):
    """DCP's arguments for `group`: without torch.distributed (one process), no collectives."""
    if dist.is_available() and dist.is_initialized():
        return {"process_group": group}
    return {"no_dist": True}


@contextlib.contextmanager
def _quiet():
    """DCP warns that it assumes one process whenever torch.distributed is not initialised, even when told."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _failure(rank: int, err: BaseException) -> str:
    """One line naming the rank and what went wrong (a full disk, a read-only folder)."""
    where = f" ({err.filename})" if getattr(err, "filename", None) else ""
    return f"rank {rank}: {getattr(err, 'strerror', None) or err}{where}"


def _write(state: dict, tmp: Path, group) -> str | None:
    """DCP's collective write of every rank's entries into `tmp`; None, or the first failing rank's error (DCP
    gathers every rank's write results, so all ranks see the same failure)."""
    try:
        with _quiet():
            dcp_save(state, storage_writer=FileSystemWriter(tmp), **_process_group(group))
    except CheckpointException as err:
        rank, (exc, _) = min(err.failures.items(), key=lambda kv: kv[0])
        return _failure(rank, exc)
    except OSError as err:
        return _failure(comm.rank(group), err)
    return None


def _own_checkpoint(folder: Path) -> bool:
    """Whether `folder` is a checkpoint this module wrote: a real folder whose meta.json has its format, or (its
    meta.json lost or damaged) that holds DCP's files and nothing else. The only kind of folder a publication
    replaces, never one a user or another tool put there (an exported model, a copy)."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    try:
        if read_meta(folder).get("format") == FORMAT:
            return True
    except ValueError:
        pass
    names = [entry.name for entry in folder.iterdir()]
    return ".metadata" in names and all(
        n in (".metadata", "meta.json", "meta.json.part") or re.fullmatch(r"__\d+_\d+\.distcp", n) for n in names)


def _publish(root: Path, tmp: Path, final: Path, meta: dict) -> str | None:
    """Rank 0: meta.json with every file's SHA-256, the rename of `tmp` to `final`, `latest`; None or what went
    wrong."""
    try:
        hashes = {f.name: file_digest(f) for f in sorted(tmp.iterdir()) if f.is_file()}
        _replace_text(tmp / "meta.json", json.dumps({**meta, "sha256": hashes}, indent=1))
        if final.exists() or final.is_symlink():
            if not _own_checkpoint(final):
                return (f"{final} exists and is not a checkpoint of paradyse-lab (no meta.json of its format); "
                        "it is left as it is: move it out of --checkpoint-dir")
            shutil.rmtree(final)
        os.replace(tmp, final)
        _replace_text(root / "latest", final.name)
    except OSError as err:
        (root / "latest.part").unlink(missing_ok=True)
        return _failure(0, err)
    return None


def save(directory: str | Path, step: int, trained: dict[str, torch.Tensor], opt, cfg, meta: dict,
         extra: dict | None = None, group=None) -> Path:
    """Publish checkpoint `step` of the named trained tensors (this rank's shards) and `opt`'s state; `meta`
    is the run's settings (checked on resume), `extra` more for meta.json (not checked). A collective.

    A write that fails on any rank (a full disk, a read-only folder) stops every rank with `RunStopped`: one
    line naming the rank and the error; the partial `.tmp-step-*` folder is removed and the previous
    checkpoint, and `latest`, stay as they were."""
    root, name = Path(directory), f"step-{step:06d}"
    tmp, final = root / f".tmp-{name}", root / name
    r, p = comm.rank(group), comm.size(group)
    mesh = dcp_entries.device_mesh_of(group) if p > 1 else None
    state = dcp_entries.dcp_state(trained, opt, cfg, p, mesh)  # refuses an optimizer it cannot keep
    error = None
    if r == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir(parents=True)
        except OSError as err:
            error = _failure(0, err)
    error = _agreed_failure(error, group)
    if error is None:
        error = _agreed_failure(_write(state, tmp, group), group)
    if error is None and r == 0:
        error = _publish(root, tmp, final, {**meta, **(extra or {}), "format": FORMAT, "layout": LAYOUT, "step": step,
                                            "world_size": p})
    error = _agreed_failure(error, group)
    if error is not None:
        if r == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        _barrier(group)  # the partial folder is gone before any rank reports
        raise RunStopped(f"checkpoint {name} was not written ({error}); the partial files are removed and the "
                         "previous checkpoint is kept")
    return final


def _check_settings(path: Path, meta: dict, meta_expected: dict) -> None:
    check_layout(path, meta)
    check_identity(path, meta, meta_expected)  # the model and data by content
    by_content = compared_by_content(meta, meta_expected) | set(IDENTITY_KEYS)
    for key, value in meta_expected.items():
        if key in by_content:
            continue
        saved = meta.get(key, OPTIONAL_SETTINGS.get(key, value))  # not recorded: its default (or not checked)
        if saved != value:
            raise UserInputError(f"checkpoint {path} has {key}={saved!r}; this run has {value!r} (resume with "
                                 f"the same --{key.replace('_', '-')}, or start a new --checkpoint-dir)")


def _verifies(path: Path, meta: dict) -> bool:
    """Every file meta.json lists is there with its recorded SHA-256, and it lists DCP's metadata."""
    hashes = meta.get("sha256") or {}
    return ".metadata" in hashes and all((path / n).is_file() and file_digest(path / n) == d for n, d in hashes.items())


def resumable(directory: str | Path, meta_expected: dict, group=None, log=None) -> Path | None:
    """The newest checkpoint under `directory` that verifies (rank 0 hashes the files, every rank takes its
    answer), or None when there is none at all; a `UserInputError` when checkpoints exist but none verifies, or
    the newest readable one belongs to another run. A collective: every rank calls it."""
    problems = []
    for path in checkpoints(directory):
        try:
            meta = read_meta(path)
        except ValueError as err:
            problems.append(f"{path.name}: {err}")
            continue
        _check_settings(path, meta, meta_expected)
        if _all_true(_verifies(path, meta) if comm.rank(group) == 0 else True, group):
            if problems and log is not None:
                log(f"resuming from {path.name}; skipped damaged checkpoints: {'; '.join(problems)}")
            return path
        problems.append(f"{path.name}: a file does not match its checksum (truncated or damaged)")
    if problems:
        raise UserInputError(f"no checkpoint under {directory} verifies ({'; '.join(problems)}); remove them or "
                             "choose another --checkpoint-dir")
    return None


def load(path: str | Path, trained: dict[str, torch.Tensor], opt, cfg, meta_expected: dict, group=None) -> dict:
    """Read checkpoint `path` (of any world size) into this rank's trained tensors and `opt`'s state, resharded
    for this world size; returns its meta.json. A collective."""
    path = Path(path)
    try:
        meta = read_meta(path)
    except ValueError as err:
        raise UserInputError(f"checkpoint {path}: {err}") from None
    _check_settings(path, meta, meta_expected)
    p = comm.size(group)
    mesh = dcp_entries.device_mesh_of(group) if p > 1 else None
    reader = FileSystemReader(path)
    saved = set(reader.read_metadata().state_dict_metadata)
    template = dcp_entries.state_template(trained, saved, cfg, p, mesh)
    with _quiet():
        dcp_load(template, storage_reader=reader, **_process_group(group))
    weights = dcp_entries.strip(template, "model.")
    moments = {m: dcp_entries.strip(template, f"optim.{m}.") for m in dcp_entries.MOMENTS}
    with torch.no_grad():
        for name, param in trained.items():
            param.copy_(dcp_entries.local_tensor(weights, name, param, cfg))
            if param.numel() and any(k == name or k.startswith(name + ".") for k in moments["exp_avg"]):
                opt.state[param] = {"step": template["optim.step"].clone(),
                                    **{m: dcp_entries.local_tensor(moments[m], name, param, cfg).clone()
                                       for m in dcp_entries.MOMENTS}}
    return meta


def read_entries(path: str | Path) -> tuple[dict[str, torch.Tensor], dict]:
    """(every saved tensor as a full global tensor, by its DCP name: `model.NAME[.SECTION]`,
    `optim.MOMENT.NAME[.SECTION]`, `optim.step`; meta.json) of checkpoint `path`, whatever world size wrote it,
    in this process alone (no process group). Verified first: a damaged checkpoint is a `UserInputError`."""
    path = Path(path)
    try:
        meta = read_meta(path)
    except ValueError as err:
        raise UserInputError(f"checkpoint {path}: {err}") from None
    _check_settings(path, meta, {})
    if not _verifies(path, meta):
        raise UserInputError(f"checkpoint {path}: a file does not match its checksum (truncated or damaged)")
    reader = FileSystemReader(path)
    entries = {k: torch.empty(md.size, dtype=md.properties.dtype)
               for k, md in reader.read_metadata().state_dict_metadata.items() if isinstance(md, TensorStorageMetadata)}
    with _quiet():
        dcp_load(entries, storage_reader=reader, no_dist=True)
    return entries, meta


def read_full(path: str | Path) -> tuple[dict[str, torch.Tensor], dict]:
    """(the full model state dict in the runtime's names, meta.json) of checkpoint `path` (`read_entries`):
    for export-hf and tests."""
    entries, meta = read_entries(path)
    cfg = config_of(meta)
    weights = dcp_entries.strip(entries, "model.")
    full = {name: dcp_entries.local_tensor(weights, name, like, cfg)
            for name, like in GPTParams(cfg).state_dict().items()}
    return full, meta


def model_record(cfg, init_from: str = "", model: str = "") -> dict:
    """What meta.json records of the model beside the run's settings: its `ModelSpec` as checkpoints record it
    (`architecture`), and for export-hf the config.json of the Hugging Face source it came from (`hf_config`: the
    --init-from folder's, else a --model given as a config.json or a folder holding one; None for a preset) and
    that folder (`hf_folder`, absolute: its tokenizer files go with the export)."""


    folder = None
    if init_from:
        folder = Path(init_from)
    elif model and Path(model).is_dir() and (Path(model) / "config.json").is_file():
        folder = Path(model)
    if folder is not None:
        return {"architecture": architecture_record(cfg), "hf_config": read_config(folder),
                "hf_folder": str(folder.resolve())}
    config = None
    if model and model.endswith(".json") and Path(model).is_file():
        try:
            config = json.loads(Path(model).read_text(encoding="utf-8-sig"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            config = None  # the run read it: a file replaced since is not carried
    return {"architecture": architecture_record(cfg), "hf_config": config if isinstance(config, dict) else None,
            "hf_folder": str(Path(model).resolve().parent) if isinstance(config, dict) else None}


def config_of(meta: dict) -> ModelSpec:
    """The `ModelSpec` recorded in a checkpoint's meta.json (`architecture`); a one-line `UserInputError`
    when its fields are not this version's (a checkpoint of another layout whose meta.json says otherwise)."""

    arch = meta.get("architecture")
    if not arch:
        raise UserInputError("the checkpoint's meta.json records no architecture (written before export-hf existed)")
    known, needed = set(RECORD_KEYS), set(REQUIRED_KEYS)
    if not isinstance(arch, dict) or set(arch) - known or needed - set(arch):
        odd = ([type(arch).__name__] if not isinstance(arch, dict) else sorted(set(arch) - known)
               or [f"no {name}" for name in sorted(needed - set(arch))])
        raise UserInputError(f"the checkpoint's meta.json architecture holds {', '.join(map(str, odd))}, unknown to "
                             f"checkpoint layout {LAYOUT} (its layout says {written(meta.get('layout', 1))}): it "
                             "was written by another version of paradyse-lab")
    return spec_of_record(arch)
