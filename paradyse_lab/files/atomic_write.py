"""Writing a file so that no reader, and no crash, ever sees it half written.

The text goes to a temporary file in the target's folder, which is renamed over the target (`os.replace`,
atomic on POSIX within one file system) only once it is complete; on any error the temporary file is
removed and the target is left as it was. Every CSV, JSON, text, figure and joblib output of the toolkit is
written this way.

- A new file gets the mode a plain `open` would give it (0666 less the umask), not mkstemp's private 0600;
  a file being replaced keeps its own mode (a 0600 file stays 0600).
- A symbolic link is written through: its final target is replaced and the link stays a link.
- Only a regular file (or a name not yet taken) can be replaced: a device node (`/dev/null`), a FIFO or a
  socket is refused before anything is written, as are a folder and a path whose parent is a file; each is
  a `UserInputError` (one line).
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from paradyse_lab.errors import UserInputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def prepare_output_dir(path: str | Path, field: str = "--out") -> Path:
    """Make the folder `path` (and its parents); a file in the way is a one-line `UserInputError`."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserInputError(f"{field} {str(path)!r} is a file; it must name a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise UserInputError(f"{field} {str(path)!r}: a parent of it is a file, not a folder") from None
    except OSError as err:
        raise UserInputError(f"{field} {str(path)!r}: cannot create the folder ({err.strerror})") from None
    return path


TEMPORARY_NAME = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")
"""The name of a temporary file `atomic_open` writes (`.NAME.XXXXXXXX.tmp`); a killed write leaves one."""


def is_temporary_output(path: str | Path) -> bool:
    """Whether `path` is named like the temporary file of an unfinished atomic write (not a document)."""
    return TEMPORARY_NAME.fullmatch(Path(path).name) is not None


_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"))


def check_output_file(path: str | Path, field: str = "--out") -> Path:
    """Check that `path` can become a regular file (not a folder, a device node, a FIFO or a socket, a symbolic
    link to one included; parents made): a one-line `UserInputError`. Only looks (stat); writes nothing."""
    path = Path(path)
    if path.is_dir():
        raise UserInputError(f"{field} {str(path)!r} is a folder; it must name a file")
    try:
        mode = os.stat(path).st_mode  # follows a symbolic link to what it names
    except OSError:
        mode = None  # not there yet (or a dangling link): a new regular file
    if mode is not None and not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        raise UserInputError(f"{field} {str(path)!r} is {kind}; it must name a regular file (or a new one)")
    prepare_output_dir(Path(os.path.realpath(path)).parent, f"the folder of {field}")
    return path


def _new_mode(target: Path) -> int:
    """The mode the written file gets: the replaced file's own, else what `open` would give a new one."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        return 0o666 & ~_umask()


@contextmanager
def atomic_open(path: str | Path, newline: str | None = "", binary: bool = False) -> Iterator[TextIO]:
    """A handle (text, or bytes with `binary`) whose content replaces `path` when the block ends without an
    error (parents made; a symbolic link written through to its target; module docstring)."""
    check_output_file(path, "output")
    target = Path(os.path.realpath(path))  # a link's final target: the link itself stays
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as err:  # a folder that takes no new file (/proc, read-only, no permission): name the output
        raise OSError(err.errno, err.strerror, str(path)) from None
    try:
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", newline=newline)) as handle:
            yield handle
        os.chmod(tmp, _new_mode(target))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` atomically (module docstring)."""
    with atomic_open(path) as handle:
        handle.write(text)


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` atomically (module docstring)."""
    with atomic_open(path, binary=True) as handle:
        handle.write(data)


def read_json_object(path: str | Path) -> dict:
    """A JSON object from `path`; a file that is not one (damaged, truncated, not UTF-8, a list) is a
    `UserInputError` naming the file, never a traceback."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise UserInputError(f"{path}: not a readable JSON file ({err}); remove it or use another --out") from None
    if not isinstance(data, dict):
        raise UserInputError(f"{path}: expected a JSON object, got {type(data).__name__}; remove it or use another "
                             "--out")
    return data
