"""Real text for `train` and `lengths`: documents read from a dataset on disk and tokenized with a local
tokenizer file. Nothing is downloaded.

Sources (`--dataset` with `--tokenizer PATH`; a `file:` prefix is allowed):
- a folder written by the `datasets` library's `save_to_disk` (a `Dataset`, or a `DatasetDict` whose `train`
  split is read), loaded with `datasets.load_from_disk`;
- a `.jsonl` file (one JSON object per line), a `.parquet` file or an `.arrow` file (Arrow IPC, file or stream
  form, as `save_to_disk` writes its shards), read with `pyarrow`;
- a folder of such files, read in name order (hidden files, named with a leading dot, are skipped).
Each document is the string in the text column (`--text-column`, default `text`) of one row.
The tokenizer is a `tokenizer.json` (or a folder holding one: a Hugging Face model folder) read by the
`tokenizers` library's `Tokenizer.from_file`; documents are encoded without special tokens added.

Order (`--data-order`): `file` (the rows as stored), `shuffled` (a seeded permutation, `--seed`) or `sorted`
(ascending length: the paper's curriculum, the default only for the paper's workloads and length files).
"""

from __future__ import annotations

import random
from pathlib import Path

from paradyse_lab.errors import UserInputError, unknown_name
from paradyse_lab.files import input_files, typed_json

TEXT_FILE_SUFFIXES = (".jsonl", ".parquet", ".arrow")
"""File kinds a text dataset may be made of."""
DATA_ORDERS = ("file", "shuffled", "sorted")
"""Orders the documents of a file dataset can be trained in."""


def source_path(dataset: str, flag: str = "--dataset") -> Path:
    """The path of a text dataset (its `file:` prefix removed); `UserInputError` naming `flag` when it does not
    exist."""
    path = Path(dataset.removeprefix("file:"))
    if not path.exists():
        raise UserInputError(f"{flag} {dataset!r}: no such file or folder (with --tokenizer it names a "
                             f"save_to_disk folder or {', '.join(TEXT_FILE_SUFFIXES)} files)")
    if not path.is_dir():
        input_files.regular_file(path, f"{flag} {dataset!r}", input_files.MAX_DATA_BYTES)
    return path


def read_texts(dataset: str, column: str = "text", flag: str = "--dataset") -> list[str]:
    """The text column of every row of the dataset (module docstring), in stored order; `flag` is the option that
    named it (--dataset or --eval-dataset), for the messages."""
    path = source_path(dataset, flag)
    if path.is_dir() and any((path / name).is_file() for name in ("state.json", "dataset_dict.json")):
        return _from_saved_dataset(path, column, flag)
    files = sorted(f for f in path.iterdir() if f.suffix in TEXT_FILE_SUFFIXES and not f.name.startswith(".")
                   and f.is_file()) if path.is_dir() else [path]
    if not files:
        raise UserInputError(f"{flag} {dataset!r} holds no {', '.join(TEXT_FILE_SUFFIXES)} files and is not a "
                             "save_to_disk folder")
    texts: list[str] = []
    for f in files:
        texts += _from_file(f, column, flag)
    return texts


def utf8_lines(path: Path, flag: str):
    """(line number, line) of a text file, each line decoded as UTF-8; a `UserInputError` naming `flag`, the file
    and the line where one is not (never a silent replacement, nor the generic "an input file")."""
    input_files.regular_file(path, f"{flag} {str(path)!r}", input_files.MAX_DATA_BYTES)
    with open(path, "rb") as f:
        for i, raw in enumerate(f, 1):
            try:
                yield i, raw.decode("utf-8-sig" if i == 1 else "utf-8")  # a byte-order mark is no part of line 1
            except UnicodeDecodeError as err:
                raise UserInputError(f"{flag} {str(path)!r} line {i} is not UTF-8 text ({err.reason} at byte "
                                     f"{err.start + 1} of the line)") from None


def _check_saved_state(path: Path, flag: str) -> None:
    """A `Dataset` folder's state.json names its Arrow files: a JSON object whose `_data_files` lists objects with
    a `filename` inside the folder (one leaving it would be read from elsewhere); a one-line error otherwise."""
    state = path / "state.json"
    if not state.is_file():
        return  # a DatasetDict folder: each split's folder is checked by the library
    try:
        data = typed_json.loads_checked(state.read_text(encoding="utf-8"), f"{flag} {str(path)!r}: state.json")
    except (OSError, UnicodeDecodeError) as err:
        raise UserInputError(f"{flag} {str(path)!r}: state.json cannot be read ({err})") from None
    files = data.get("_data_files") if isinstance(data, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, dict) and isinstance(f.get("filename"), str)
                                              for f in files):
        raise UserInputError(f"{flag} {str(path)!r}: state.json is damaged (its _data_files must list objects "
                             "with a filename)")
    for f in files:
        name = Path(f["filename"])
        if name.is_absolute() or ".." in name.parts:
            raise UserInputError(f"{flag} {str(path)!r}: state.json names the data file {f['filename']!r}, which "
                                 "leaves the folder")


def _from_saved_dataset(path: Path, column: str, flag: str = "--dataset") -> list[str]:
    try:
        import datasets  # optional and slow (the [text] extra), only for a save_to_disk folder
    except ImportError:
        raise UserInputError("reading a save_to_disk folder needs the `datasets` library (pip install "
                             "'paradyse-lab[text]')") from None
    _check_saved_state(path, flag)
    try:
        return _saved_texts(datasets, path, column)
    except UserInputError:
        raise
    except Exception as err:  # noqa: BLE001 - the library and pyarrow raise many kinds for a damaged folder
        raise UserInputError(f"{flag} {str(path)!r} is not a readable save_to_disk folder ({type(err).__name__}: "
                             f"{' '.join(str(err).split())[:160]})") from None


def _saved_texts(datasets, path: Path, column: str) -> list[str]:
    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        if "train" not in loaded:
            raise UserInputError(f"{path}: a DatasetDict without a 'train' split (splits: {', '.join(loaded)}); "
                                 "give the folder of one split")
        loaded = loaded["train"]
    if column not in loaded.column_names:
        raise unknown_name("--text-column", column, loaded.column_names)
    return [_checked_text(t, path.name, i) for i, t in enumerate(loaded[column])]


def _from_file(path: Path, column: str, flag: str = "--dataset") -> list[str]:
    if path.suffix == ".jsonl":
        rows = []
        for i, line in utf8_lines(path, flag):
            if line.strip():
                row = typed_json.loads_checked(line, f"{path.name} line {i}")
                if not isinstance(row, dict) or column not in row:
                    raise UserInputError(f"{path.name} line {i}: expected an object with a {column!r} field "
                                         "(--text-column)")
                rows.append(_checked_text(row[column], path.name, i))
        return rows
    table = _arrow_table(path)
    if column not in table.column_names:
        raise unknown_name("--text-column", column, table.column_names)
    return [_checked_text(t, path.name, i) for i, t in enumerate(table.column(column).to_pylist(), 1)]


def _arrow_table(path: Path):
    try:
        import pyarrow as pa  # optional (the [text] extra), only for Arrow and Parquet files
        import pyarrow.parquet as pq  # optional, as above
    except ImportError:
        raise UserInputError(f"reading {path.suffix} files needs pyarrow (pip install 'paradyse-lab[text]')") from None
    input_files.regular_file(path, f"{str(path)!r}", input_files.MAX_DATA_BYTES)
    try:
        if path.suffix == ".parquet":
            return pq.read_table(path)
        with pa.memory_map(str(path)) as source:
            try:
                return pa.ipc.open_file(source).read_all()
            except pa.ArrowInvalid:
                source.seek(0)
                return pa.ipc.open_stream(source).read_all()
    except pa.ArrowException as err:
        raise UserInputError(f"{path.name} is not a readable {path.suffix} file ({err})") from None


def _checked_text(value, where: str, row: int) -> str:
    if not isinstance(value, str):
        raise UserInputError(f"{where} row {row}: the text column holds {type(value).__name__}, not a string")
    return value


def load_tokenizer(path: str):
    """A `tokenizers.Tokenizer` from a tokenizer.json, or from the tokenizer.json inside a folder."""
    file = Path(path)
    if file.is_dir():
        file = file / "tokenizer.json"
    if not file.is_file():
        raise UserInputError(f"--tokenizer {path!r}: no tokenizer.json there (give the file or its folder)")
    from tokenizers import Tokenizer  # tokenizers: optional, only when text is tokenized

    try:
        return Tokenizer.from_file(str(file))
    except Exception as err:  # noqa: BLE001 - the library raises a bare Exception on a malformed file
        raise UserInputError(f"--tokenizer {path!r} is not a tokenizers file ({' '.join(str(err).split())[:120]})"
                             ) from None


def tokenize(texts: list[str], tokenizer_path: str) -> list[list[int]]:
    """Token ids of each text (no special tokens added); empty documents are dropped."""
    tokenizer = load_tokenizer(tokenizer_path)
    encoded = tokenizer.encode_batch(texts, add_special_tokens=False)
    return [e.ids for e in encoded if e.ids]


def ordered(docs: list, order: str, seed: int) -> list:
    """`docs` in `order` (module docstring); `sorted` is stable (equal lengths keep their file order)."""
    if order == "file":
        return list(docs)
    if order == "shuffled":
        out = list(docs)
        random.Random(seed).shuffle(out)
        return out
    if order == "sorted":
        return sorted(docs, key=len)
    raise unknown_name("--data-order", order, DATA_ORDERS)
