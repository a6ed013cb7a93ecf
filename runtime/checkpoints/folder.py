"""The checkpoint folder: its lock, its `step-*` checkpoints, `latest`, meta.json, the refusal to write over it.

Library module (no command). The checkpoints themselves are DCP's (written and read
through torch.distributed.checkpoint, resumable at any world size); this module holds what concerns the folder.
Layout under DIR:

    DIR/step-000120/...     one checkpoint: DCP's files and meta.json (step, run settings, SHA-256 of its files)
    DIR/latest              the name of the newest complete checkpoint
    DIR/.lock               held (flock) by the one run that writes the folder

`folder_lock` keeps a second run (two `train` on one --checkpoint-dir) out for the whole run, naming the
holder; `checkpoints` lists the `step-*` folders newest first, `latest` reads the marker, `read_meta` reads a
checkpoint's meta.json, `workload_size` the size the run's workload was sampled with (so a resumed run with
another --steps trains the lengths the first one trained), and `refuse_overwrite` stops a new run (without
--resume) from writing over a folder that holds checkpoints. `_agreed_failure`, `_all_true`, `_barrier` and
`_replace_text` are the collective and atomic pieces dcp_checkpoint.py publishes and verifies with.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist

from paradyse_lab.errors import UserInputError
from paradyse_lab.files import input_files
from paradyse_lab.runtime.comm import collectives as comm

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


def _lock_or_refusal(directory: str | Path) -> tuple[int | None, str]:
    """(the open lock file, '') when this process now holds DIR's lock, else (None, the one-line refusal): another
    run holds it, or the folder or its lock file cannot be made or opened (the reason as the system gives it)."""
    try:
        fd, holder = _take_lock(Path(directory))
    except OSError as err:
        return None, (f"--checkpoint-dir {str(directory)!r} cannot be locked for this run: "
                      f"{err.strerror or err}{f' ({str(err.filename)!r})' if err.filename else ''}")
    if holder:
        return None, (f"--checkpoint-dir {str(directory)!r} is in use by another run ({holder}); wait for it to "
                      "end, or choose another folder")
    return fd, ""


@contextmanager
def folder_lock(directory: str | Path, group=None) -> Iterator[None]:
    """Hold DIR's lock while the block runs (module docstring; nothing when `directory` is ''). A collective:
    rank 0 takes the lock, and when it cannot (another run holds it, or the lock file cannot be made) every rank
    raises the same `UserInputError`: rank 0 never leaves alone with its peers waiting for its answer."""
    if not directory:
        yield
        return
    fd, refusal = _lock_or_refusal(directory) if comm.rank(group) == 0 else (None, "")
    if comm.size(group) > 1:
        refusal = comm.broadcast_object(refusal, 0, group)  # '' when rank 0 got the lock
    if refusal:
        raise UserInputError(refusal)
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
        meta = json.loads(input_files.read_text(path / "meta.json", f"{path / 'meta.json'}"))
    except FileNotFoundError:
        raise ValueError("meta.json is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, UserInputError):
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


def _all_true(ok: bool, group) -> bool:
    """Whether `ok` holds on every rank (a collective)."""
    if comm.size(group) == 1:
        return ok
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else "cpu"
    flag = torch.tensor([1 if ok else 0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)  # [1] -> [1]
    return bool(flag.item())


def refuse_overwrite(directory: str | Path) -> None:
    """A new run (no --resume) must not write over checkpoints: a `UserInputError` when there are any."""
    found = checkpoints(directory)
    if found:
        raise UserInputError(f"--checkpoint-dir {str(directory)!r} holds checkpoints (newest {found[0].name}); "
                             "pass --resume to continue from them, or choose another folder")
