"""Sharded, atomic training checkpoints: one file per rank, published by a directory rename.

Library module (no command; runtime/train.py writes and reads them). Layout under DIR:

    DIR/step-000120/rank-0.pt ... rank-{p-1}.pt   this rank's model shard, optimizer state, step
    DIR/step-000120/meta.json                      world size, model, step
    DIR/latest                                     the name of the newest complete checkpoint

Atomicity: every rank writes `rank-r.pt.part` into `DIR/.tmp-step-000120` and renames it to
`rank-r.pt`; after a barrier rank 0 writes meta.json, renames the whole directory to `step-000120` and
replaces `latest` (written to a temporary file, then `os.replace`). A crash at any point leaves `latest`
naming the previous complete checkpoint. Resuming needs the same world size (the shards are 1/p slices).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
import torch.distributed as dist

from paradyse_lab.errors import UserInputError
from runtime import comm


def _barrier(group) -> None:
    if comm.size(group) > 1:
        dist.barrier(group=group)


def _replace_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(text)
    os.replace(tmp, path)


def save(directory: str | Path, step: int, state: dict, meta: dict, group=None) -> Path:
    """Write this rank's `state` (a collective: every rank calls it) and publish checkpoint `step`."""
    root = Path(directory)
    name = f"step-{step:06d}"
    tmp, final = root / f".tmp-{name}", root / name
    r, p = comm.rank(group), comm.size(group)
    if r == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    _barrier(group)
    part = tmp / f"rank-{r}.pt.part"
    torch.save(state, part)
    os.replace(part, tmp / f"rank-{r}.pt")
    _barrier(group)
    if r == 0:
        _replace_text(tmp / "meta.json", json.dumps({**meta, "step": step, "world_size": p}, indent=1))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        _replace_text(root / "latest", name)
    _barrier(group)
    return final


def latest(directory: str | Path) -> Path | None:
    """The newest complete checkpoint under `directory`, or None."""
    marker = Path(directory) / "latest"
    if not marker.exists():
        return None
    path = Path(directory) / marker.read_text().strip()
    return path if (path / "meta.json").exists() else None


def load(path: str | Path, meta_expected: dict, group=None) -> tuple[dict, dict]:
    """(this rank's state, meta) of the checkpoint at `path`; raises `UserInputError` when it was written
    by another world size or for another model."""
    path = Path(path)
    meta = json.loads((path / "meta.json").read_text())
    p = comm.size(group)
    if meta.get("world_size") != p:
        raise UserInputError(f"checkpoint {path} was written by {meta.get('world_size')} ranks; this run has {p}")
    for key, value in meta_expected.items():
        if meta.get(key) != value:
            raise UserInputError(f"checkpoint {path} has {key}={meta.get(key)!r}; this run has {value!r}")
    state = torch.load(path / f"rank-{comm.rank(group)}.pt", map_location="cpu", weights_only=False)
    return state, meta
