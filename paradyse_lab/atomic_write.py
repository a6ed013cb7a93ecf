"""Writing a file so that no reader, and no crash, ever sees it half written.

The text goes to a temporary file in the target's folder, which is renamed over the target (`os.replace`,
atomic on POSIX within one file system) only once it is complete; on any error the temporary file is
removed and the target is left as it was. The file gets the mode a plain `open` would give it (0666 less
the umask), not mkstemp's private 0600. Every CSV, JSON, text, figure and joblib output of the toolkit is
written this way. A target that is a folder, or whose parent is a file, is a `UserInputError` (one line).
"""

from __future__ import annotations

import os
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


def check_output_file(path: str | Path, field: str = "--out") -> Path:
    """Check that `path` can become a file (not a folder; parents made): a one-line `UserInputError`."""
    path = Path(path)
    if path.is_dir():
        raise UserInputError(f"{field} {str(path)!r} is a folder; it must name a file")
    prepare_output_dir(path.parent, f"the folder of {field}")
    return path


@contextmanager
def atomic_open(path: str | Path, newline: str | None = "", binary: bool = False) -> Iterator[TextIO]:
    """A handle (text, or bytes with `binary`) whose content replaces `path` when the block ends without an
    error (parents made)."""
    path = check_output_file(path, "output")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", newline=newline)) as handle:
            yield handle
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
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
    import json

    from paradyse_lab.errors import UserInputError

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise UserInputError(f"{path}: not a readable JSON file ({err}); remove it or use another --out") from None
    if not isinstance(data, dict):
        raise UserInputError(f"{path}: expected a JSON object, got {type(data).__name__}; remove it or use another "
                             "--out")
    return data
