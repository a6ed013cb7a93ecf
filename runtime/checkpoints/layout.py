"""A checkpoint's layout version (meta.json's `format` and `layout`), and the checks of a resume that read
meta.json alone: the layout and the model of the checkpoint a resume would take. Without
torch.distributed.checkpoint (~1 CPU s to import), so that `train --nproc N`'s launcher refuses such a
checkpoint in one line before it starts a rank (the fork server's imports and the ranks' start: seconds), with
the message the ranks would print; the ranks still check the rest (the data and weights by content, the
settings, every file's hash)."""

from __future__ import annotations

from pathlib import Path

from paradyse_lab.errors import UserInputError
from paradyse_lab.files.typed_json import written
from paradyse_lab.runtime.checkpoints.folder import checkpoints, read_meta
from paradyse_lab.runtime.checkpoints.resume_identity import check_identity

FORMAT = "torch.distributed.checkpoint"
"""meta.json's `format`; the per-rank checkpoints of earlier versions have none."""
LAYOUT = 1
"""meta.json's `layout`: the version of what a checkpoint holds (its tensors' names and sections, its meta.json's
`architecture` fields). Raised when either changes, so that a checkpoint of another version is refused with one
line naming both versions, never read into the wrong places. Checkpoints in `FORMAT` that record none are
layout 1; the per-rank checkpoints before `FORMAT` are layout 0."""


def check_layout(path: Path, meta: dict) -> None:
    """A one-line `UserInputError` naming both versions when checkpoint `path` is not of `LAYOUT`."""
    if meta.get("format") != FORMAT:
        raise UserInputError(f"checkpoint {path} is in the per-rank format of an earlier paradyse-lab (checkpoint "
                             f"layout 0); this version reads layout {LAYOUT}: resume it with that version, or "
                             "start a new --checkpoint-dir")
    layout = meta.get("layout", 1)
    if layout != LAYOUT or isinstance(layout, bool):
        raise UserInputError(f"checkpoint {path} is of checkpoint layout {written(layout)}; this version of "
                             f"paradyse-lab reads layout {LAYOUT}: use the version that wrote it, or start a new "
                             "--checkpoint-dir")


def check_resumed_model(directory: str | Path, architecture: dict, model: str) -> None:
    """The first checks a resume makes of the checkpoint it would take (the newest whose meta.json reads, as
    `resumable` takes them in turn): its layout, then the model that wrote it against this run's `architecture`
    (`--model` `model`); their one-line `UserInputError`, else nothing (no checkpoint included)."""
    for path in checkpoints(directory):
        try:
            meta = read_meta(path)
        except ValueError:  # damaged: skipped by the resume too
            continue
        check_layout(path, meta)
        check_identity(path, meta, {"architecture": architecture, "model": model})  # no digests: the model alone
        return
