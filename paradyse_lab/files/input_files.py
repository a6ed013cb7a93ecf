"""Input files are regular files of a bounded size, checked before they are opened.

A FIFO given as config.json blocks `open` until a writer comes (forever, at the command line), and a character
device (`/dev/zero`, `/dev/urandom`) is read without end, whole into memory. Every reader of the user's input
files asks `regular_file` first: it `stat`s the path (which never blocks) and refuses, with one line naming the
option and what the path is, anything but a regular file, and a file larger than the reader's bound;
`read_bytes` / `read_text` then read the size `stat` gave (never an unbounded stream).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from paradyse_lab.errors import UserInputError

MAX_TEXT_BYTES = 256 * 2**20
"""Largest config.json, TOML, problem, index or meta.json file read (256 MiB: far above any real one)."""
MAX_DATA_BYTES = 64 * 2**30
"""Largest dataset, profile or cost-model file read (64 GiB: a bound on a file, not a guess at real data)."""

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def regular_file(path: str | Path, what: str, limit: int = MAX_TEXT_BYTES) -> Path:
    """`path` when it is a regular file of at most `limit` bytes (`file_size`)."""
    file_size(path, what, limit)
    return Path(path)


def file_size(path: str | Path, what: str, limit: int = MAX_TEXT_BYTES) -> int:
    """The size of `path` when it is a regular file (a link to one is one) of at most `limit` bytes; else a one-line
    `UserInputError` starting with `what` (the option or the kind of file, e.g. "model config 'x.json'").
    A missing path raises `FileNotFoundError`, for the reader's own message."""
    path = Path(path)
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise UserInputError(f"{what} is {_kind(info.st_mode)}, not a regular file")
    if info.st_size > limit:
        raise UserInputError(f"{what} is {info.st_size:,} bytes, more than the {limit:,} read")
    return info.st_size


def read_bytes(path: str | Path, what: str, limit: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of the regular file `path` (`file_size`: at most `limit`), as many as `stat` gave (a file that
    grew while read is refused)."""
    size = file_size(path, what, limit)
    with open(path, "rb") as handle:
        data = handle.read(size + 1)  # one byte more than the file had: a file that grew is seen
    if len(data) > size:
        raise UserInputError(f"{what} grew while it was read (give a file no process is writing)")
    return data


def read_text(path: str | Path, what: str, encoding: str = "utf-8", limit: int = MAX_TEXT_BYTES) -> str:
    """`read_bytes` decoded (a `UnicodeDecodeError` for the reader's own message)."""
    return read_bytes(path, what, limit).decode(encoding)
