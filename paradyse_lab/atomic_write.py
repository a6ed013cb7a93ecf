"""Writing a file so that no reader, and no crash, ever sees it half written.

The text goes to a temporary file in the target's folder, which is renamed over the target (`os.replace`,
atomic on POSIX within one file system) only once it is complete; on any error the temporary file is
removed and the target is left as it was. The file gets the mode a plain `open` would give it (0666 less
the umask), not mkstemp's private 0600. Every CSV, JSON or text output of the toolkit is written this way.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_open(path: str | Path, newline: str | None = "") -> Iterator[TextIO]:
    """A text handle whose content replaces `path` when the block ends without an error (parents made)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline=newline) as handle:
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
