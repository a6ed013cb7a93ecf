"""Reused results keyed on what produced them: their full settings and the code version.

A reusable output (a simulated run's CSV, a `reproduce` step's CSVs) is reused only when its stamp says it
was made by the same settings and the same code, and the files are still the ones the stamp hashed. The
stamp is written only after the outputs are complete, so a killed run leaves no stamp and is recomputed.

- `code_version()`: SHA-256 over the sources of the packages that compute results (`paradyse_lab`,
  `solvers`, `simulator`, `figures`, bundled data included); any edit to them recomputes everything.
- `result_key(settings, files)`: SHA-256 of the settings (canonical JSON), the contents of the input files
  they name (a cluster TOML, a profile CSV) and the code version.
- stamps: `FOLDER/.stamps/NAME.json` = {key, settings, files: {relative path: SHA-256}}; `is_fresh` says
  whether every file is present and unchanged under the same key, `write_stamp` records them.

Library module (no command); `paradyse-lab reproduce` and `paradyse-lab experiment` use it.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

from paradyse_lab.atomic_write import write_text_atomic

ROOT = Path(__file__).resolve().parents[1]
KEYED_PACKAGES = ("paradyse_lab", "solvers", "simulator", "figures")
"""Folders (under the repository root) whose files make the code version."""
SOURCE_SUFFIXES = (".py", ".csv", ".toml", ".json")
STAMP_DIR = ".stamps"


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's bytes (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@lru_cache(maxsize=1)
def code_version() -> str:
    """SHA-256 over every source and data file of KEYED_PACKAGES (relative path and content)."""
    h = hashlib.sha256()
    for package in KEYED_PACKAGES:
        folder = ROOT / package
        for path in sorted(folder.rglob("*")):
            if path.suffix in SOURCE_SUFFIXES and path.is_file() and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(ROOT)).encode())
                h.update(file_digest(path).encode())
    return h.hexdigest()


def input_files(*names: str) -> list[Path]:
    """The names among `names` that are files (a cluster TOML, a profile CSV, a .joblib model)."""
    return [Path(n) for n in names if n and Path(n).is_file()]


def result_key(settings: dict, files=()) -> str:
    """Key of a result made with `settings` from the input `files`, by this code version."""
    h = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    for f in files:
        h.update(file_digest(f).encode())
    h.update(code_version().encode())
    return h.hexdigest()


def stamp_path(folder: str | Path, name: str) -> Path:
    """Where the stamp NAME of results under `folder` lives."""
    return Path(folder) / STAMP_DIR / f"{name}.json"


def is_fresh(stamp: str | Path, key: str) -> bool:
    """Whether `stamp` exists with `key` and every file it lists is present and unchanged."""
    stamp = Path(stamp)
    try:
        record = json.loads(stamp.read_text())
        if record.get("key") != key or not isinstance(record.get("files"), dict):
            return False
        base = stamp.parent.parent
        return all((base / rel).is_file() and file_digest(base / rel) == digest
                   for rel, digest in record["files"].items())
    except (OSError, ValueError, AttributeError):
        return False


def write_stamp(stamp: str | Path, key: str, settings: dict, files) -> None:
    """Record that `files` (under the stamp's folder's parent) were made with `key` / `settings`."""
    stamp = Path(stamp)
    base = stamp.parent.parent
    digests = {str(Path(f).resolve().relative_to(base.resolve())): file_digest(f) for f in files}
    write_text_atomic(stamp, json.dumps({"key": key, "settings": settings, "files": digests},
                                        indent=1, sort_keys=True, default=str) + "\n")
