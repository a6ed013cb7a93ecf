"""Reused results keyed on what produced them: their full settings and the code version.

A reusable output (a simulated run's CSV, a `reproduce` step's CSVs) is reused only when its stamp says it
was made by the same settings and the same code, and the files are still the ones the stamp hashed. The
stamp is written only after the outputs are complete, so a killed run leaves no stamp and is recomputed.

- `code_version()`: SHA-256 over the sources of the packages that compute results (`paradyse_lab`,
  `solvers`, `simulator`, `figures`, bundled data included); any edit to them recomputes everything.
- `result_key(settings, files)`: SHA-256 of the settings (canonical JSON), the contents of the input files
  they name and the code version.
- `named_files(settings)`: every file the settings name, at any depth (lists and tables included): a value
  that is a file (a profile CSV, a .joblib model), a workload `file:PATH[#COLUMN]`'s PATH, and for a cluster
  TOML every file of its base chain (`base = "other.toml"`, and that file's base, ...:
  `paradyse_lab.cluster.files.base_chain`). Editing any of them, even a base file no setting names directly,
  changes the key, so the results are recomputed rather than reused.
- stamps: `FOLDER/.stamps/NAME.json` = {key, settings, files: {relative path: SHA-256}}; `is_fresh` says
  whether every file is present and unchanged under the same key, `write_stamp` records them.

Library module (no command); `paradyse-lab reproduce` and `paradyse-lab experiment` use it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from functools import lru_cache
from pathlib import Path

from paradyse_lab.cluster.files import base_chain
from paradyse_lab.files.atomic_write import write_text_atomic

KEYED_PACKAGES = ("paradyse_lab", "paradyse_lab.solvers", "paradyse_lab.simulator", "paradyse_lab.figures")
"""Packages whose files make the code version (the subpackages' folders sit at a checkout's root, or inside
paradyse_lab/ once installed: each is found where it is)."""
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
        folder = package_folder(package)
        for path in source_files(folder):
            if package == "paradyse_lab" and path.relative_to(folder).parts[0] in SUBPACKAGE_FOLDERS:
                continue  # an installed copy holds the subpackages inside: each is keyed once, by its own name
            h.update(f"{package}/{path.relative_to(folder).as_posix()}".encode())
            h.update(file_digest(path).encode())
    return h.hexdigest()


def source_files(folder: Path, suffixes=SOURCE_SUFFIXES) -> list[Path]:
    """The files under `folder` whose suffix is in `suffixes`, every subfolder included, compiled caches left out, in
    path order: what a digest of the code in `folder` reads."""
    return [path for path in sorted(folder.rglob("*"))
            if path.suffix in suffixes and path.is_file() and "__pycache__" not in path.parts]


SUBPACKAGE_FOLDERS = ("runtime", "solvers", "simulator", "figures")


def package_folder(package: str) -> Path:
    """The folder of a package, found without importing it (only its parent package is imported)."""
    spec = importlib.util.find_spec(package)
    return Path(spec.submodule_search_locations[0]).resolve()


def _files_of_name(name: str) -> list[Path]:
    """The files one string setting names (module docstring)."""
    path = name[5:].partition("#")[0] if name.startswith("file:") else name
    if not path or not Path(path).is_file():
        return []
    return base_chain(path) if path.endswith(".toml") else [Path(path)]


def named_files(settings) -> list[Path]:
    """Every file `settings` names (module docstring), each once, in the order met."""
    if isinstance(settings, str):
        return _files_of_name(settings)
    if isinstance(settings, dict):
        values = list(settings.values())
    else:
        values = list(settings) if isinstance(settings, (list, tuple)) else []
    found: dict[Path, None] = {}
    for value in values:
        found.update(dict.fromkeys(named_files(value)))
    return list(found)


def input_files(*names: str) -> list[Path]:
    """The files `names` name (`named_files`: a cluster TOML with its base chain, a profile CSV, ...)."""
    return named_files(list(names))


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
