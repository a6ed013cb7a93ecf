"""Sharded, atomic, verified training checkpoints: one file per rank, published by a directory rename.

Library module (no command; runtime/train.py writes and reads them). Layout under DIR:

    DIR/step-000120/rank-0.pt ... rank-{p-1}.pt   this rank's model shard, optimizer state, step
    DIR/step-000120/meta.json                      world size, run settings, step, SHA-256 of every shard
    DIR/latest                                     the name of the newest complete checkpoint

Atomicity: every rank writes `rank-r.pt.part` into `DIR/.tmp-step-000120`, renames it to `rank-r.pt` and
records its SHA-256; after a barrier rank 0 writes meta.json (with every shard's hash), renames the whole
directory to `step-000120` and replaces `latest` (written to a temporary file, then `os.replace`). A crash
at any point leaves `latest` naming the previous complete checkpoint.

Resuming (`resumable`) takes the newest `step-*` checkpoint that verifies: meta.json parses and every
rank's shard matches its recorded hash (agreed across ranks), whatever `latest` says; damaged ones are
skipped with a note. meta.json also records the size the run's workload was sampled with
(`workload_size`), so a resumed run with another --steps trains the lengths the first one trained. A
checkpoint of another world size or other run settings (model, seed, lr, dataset,
...) is refused with a `UserInputError`, as is a folder of checkpoints none of which verifies; an empty
folder starts a new run. `refuse_overwrite` stops a new run (without --resume) from writing over a folder
that holds checkpoints.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist

from paradyse_lab.errors import RunStopped, UserInputError
from paradyse_lab.result_key import file_digest
from runtime import comm

LOCK_FILE = ".lock"
"""The lock file of a checkpoint folder (module docstring)."""


def _take_lock(directory: Path) -> tuple[int | None, str]:
    """(the open lock file, '') when this process now holds DIR's lock, else (None, what its file says)."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "holder not yet recorded"
        os.close(fd)
        return None, holder
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
    return fd, ""


@contextmanager
def folder_lock(directory: str | Path, group=None) -> Iterator[None]:
    """Hold DIR's lock while the block runs (module docstring; nothing when `directory` is ''). A collective:
    rank 0 takes the lock and every rank raises the same `UserInputError` when another run holds it."""
    if not directory:
        yield
        return
    fd, holder = _take_lock(Path(directory)) if comm.rank(group) == 0 else (None, "")
    if comm.size(group) > 1:
        holder = comm.broadcast_object(holder, 0, group)  # '' when rank 0 got the lock
    if holder:
        raise UserInputError(f"--checkpoint-dir {str(directory)!r} is in use by another run ({holder}); wait for "
                             "it to end, or choose another folder")
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # closing the file releases the lock


def _barrier(group) -> None:
    if comm.size(group) > 1:
        dist.barrier(group=group)


def _replace_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(text)
    os.replace(tmp, path)


def _agreed_failure(error: str | None, group) -> str | None:
    """The first rank's `error` (None: this rank's step went well) as every rank sees it: a collective that
    replaces a barrier, so that a rank whose write failed stops with its peers instead of leaving them waiting."""
    if comm.size(group) == 1:
        return error
    errors = [None] * comm.size(group)
    dist.all_gather_object(errors, error, group=group)
    return next((e for e in errors if e is not None), None)


def _write_shard(tmp: Path, r: int, state: dict) -> str | None:
    """Write rank `r`'s shard and its hash into `tmp`; None, or what went wrong (a full disk...) as one line."""
    try:
        part = tmp / f"rank-{r}.pt.part"
        torch.save(state, part)
        os.replace(part, tmp / f"rank-{r}.pt")
        _replace_text(tmp / f"rank-{r}.sha256", file_digest(tmp / f"rank-{r}.pt"))
    except OSError as err:
        return f"rank {r}: {err.strerror or err}" + (f" ({err.filename})" if err.filename else "")
    return None


def _publish(root: Path, tmp: Path, final: Path, step: int, meta: dict, p: int) -> str | None:
    """Rank 0: meta.json with every shard's hash, the rename to `final`, `latest`; None or what went wrong."""
    try:
        hashes = {}
        for i in range(p):
            hashes[str(i)] = (tmp / f"rank-{i}.sha256").read_text()
            (tmp / f"rank-{i}.sha256").unlink()
        _replace_text(tmp / "meta.json", json.dumps({**meta, "step": step, "world_size": p, "sha256": hashes},
                                                    indent=1))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        _replace_text(root / "latest", final.name)
    except OSError as err:
        (root / "latest.part").unlink(missing_ok=True)
        return f"rank 0: {err.strerror or err}" + (f" ({err.filename})" if err.filename else "")
    return None


def save(directory: str | Path, step: int, state: dict, meta: dict, group=None) -> Path:
    """Write this rank's `state` (a collective: every rank calls it) and publish checkpoint `step`.

    A write that fails on any rank (a full disk, a read-only folder) stops every rank with `RunStopped`: one
    line naming the rank and the error; the partial `.tmp-step-*` folder is removed and the previous
    checkpoint, and `latest`, stay as they were."""
    root = Path(directory)
    name = f"step-{step:06d}"
    tmp, final = root / f".tmp-{name}", root / name
    r, p = comm.rank(group), comm.size(group)
    error = None
    if r == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir(parents=True)
        except OSError as err:
            error = f"rank 0: {err.strerror or err} ({tmp})"
    error = _agreed_failure(error, group)
    if error is None:
        error = _agreed_failure(_write_shard(tmp, r, state), group)
    if error is None and r == 0:
        error = _publish(root, tmp, final, step, meta, p)
    error = _agreed_failure(error, group)
    if error is not None:
        if r == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        _barrier(group)  # the partial folder is gone before any rank reports
        raise RunStopped(f"checkpoint {name} was not written ({error}); the partial files are removed and the "
                         "previous checkpoint is kept")
    return final


def checkpoints(directory: str | Path) -> list[Path]:
    """The `step-*` folders under `directory`, newest (highest step) first."""
    root = Path(directory)
    if not root.is_dir():
        return []
    found = [d for d in root.iterdir() if d.is_dir() and re.fullmatch(r"step-\d+", d.name)]
    return sorted(found, key=lambda d: int(d.name[5:]), reverse=True)


def latest(directory: str | Path) -> Path | None:
    """The checkpoint `latest` names if it has its meta.json, or None (`resumable` also verifies)."""
    marker = Path(directory) / "latest"
    if not marker.is_file():
        return None
    name = marker.read_text().strip()
    path = Path(directory) / name
    return path if name and (path / "meta.json").is_file() else None


def read_meta(path: Path) -> dict:
    """meta.json of a checkpoint; a `ValueError` saying what is wrong when it is missing or damaged."""
    try:
        meta = json.loads((path / "meta.json").read_text())
    except FileNotFoundError:
        raise ValueError("meta.json is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError("meta.json is damaged") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("step"), int):
        raise ValueError("meta.json has no step")
    return meta


def workload_size(path: Path | None, default: int) -> int:
    """The number of sequences the workload of the checkpoint at `path` was sampled with (its run's --steps),
    so a resumed run trains the same lengths whatever its own --steps; `default` for a new run or a
    checkpoint that does not record it."""
    if path is None:
        return default
    size = read_meta(path).get("workload_size")
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else default


def _check_compatible(path: Path, meta: dict, meta_expected: dict, p: int) -> None:
    if meta.get("world_size") != p:
        raise UserInputError(f"checkpoint {path} was written by {meta.get('world_size')} ranks; this run has {p} "
                             "(resume with the same --nproc)")
    for key, value in meta_expected.items():
        if key in meta and meta[key] != value:
            raise UserInputError(f"checkpoint {path} has {key}={meta[key]!r}; this run has {value!r} (resume with "
                                 f"the same --{key.replace('_', '-')}, or start a new --checkpoint-dir)")


def _all_true(ok: bool, group) -> bool:
    """Whether `ok` holds on every rank (a collective)."""
    if comm.size(group) == 1:
        return ok
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else "cpu"
    flag = torch.tensor([1 if ok else 0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)  # [1] -> [1]
    return bool(flag.item())


def resumable(directory: str | Path, meta_expected: dict, group=None, log=None) -> Path | None:
    """The newest checkpoint under `directory` that verifies (module docstring), or None when there is none
    at all; raises `UserInputError` when checkpoints exist but none verifies, or the newest good one belongs
    to another run. A collective: every rank calls it."""
    p, r = comm.size(group), comm.rank(group)
    problems = []
    for path in checkpoints(directory):
        try:
            meta = read_meta(path)
        except ValueError as err:
            problems.append(f"{path.name}: {err}")
            continue
        _check_compatible(path, meta, meta_expected, p)
        shard = path / f"rank-{r}.pt"
        digest = (meta.get("sha256") or {}).get(str(r))
        ok = shard.is_file() and (digest is None or file_digest(shard) == digest)
        if _all_true(ok, group):
            if problems and log is not None:
                log(f"resuming from {path.name}; skipped damaged checkpoints: {'; '.join(problems)}")
            return path
        problems.append(f"{path.name}: a shard does not match its checksum (truncated or damaged)")
    if problems:
        raise UserInputError(f"no checkpoint under {directory} verifies ({'; '.join(problems)}); remove them or "
                             "choose another --checkpoint-dir")
    return None


def refuse_overwrite(directory: str | Path) -> None:
    """A new run (no --resume) must not write over checkpoints: a `UserInputError` when there are any."""
    found = checkpoints(directory)
    if found:
        raise UserInputError(f"--checkpoint-dir {str(directory)!r} holds checkpoints (newest {found[0].name}); "
                             "pass --resume to continue from them, or choose another folder")


def load(path: str | Path, meta_expected: dict, group=None) -> tuple[dict, dict]:
    """(this rank's state, meta) of the checkpoint at `path`; raises `UserInputError` when it was written
    by another world size or for another run, or cannot be read."""
    path = Path(path)
    try:
        meta = read_meta(path)
    except ValueError as err:
        raise UserInputError(f"checkpoint {path}: {err}") from None
    _check_compatible(path, meta, meta_expected, comm.size(group))
    try:
        state = torch.load(path / f"rank-{comm.rank(group)}.pt", map_location="cpu", weights_only=False)
    except Exception as err:  # noqa: BLE001 (a damaged pickle raises anything)
        raise UserInputError(f"checkpoint {path}: rank {comm.rank(group)}'s shard cannot be read "
                             f"({type(err).__name__})") from None
    return state, meta
