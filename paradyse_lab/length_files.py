"""Length files: the lengths of a `file:PATH` workload (paradyse_lab/workloads.py), each read exactly.

- `.txt`: one length per line; a line of several lengths separated by spaces is one packed step of that many
  documents (`paradyse-lab data lengths DIR --pack-tokens N` writes such files), its steps kept in the file's order;
- `.csv` / `.parquet`: a column (`file:PATH#COLUMN`, else the first column named seq_len, length, len, n_tokens
  or tokens);
- `.jsonl`: lines of token-id lists (or objects with `input_ids`), whose lengths are taken.
"""

from __future__ import annotations

from pathlib import Path

from paradyse_lab import input_files, typed_json
from paradyse_lab.errors import UserInputError
from paradyse_lab.workloads import MAX_LENGTH

LENGTH_COLUMNS = ("seq_len", "length", "len", "n_tokens", "tokens")


def read_length_steps(path: str | Path) -> list[tuple[int, ...]]:
    """The steps of a length file: one document each, or several on a .txt line of a packed file."""
    text_path, _, column = str(path).partition("#")
    p = Path(text_path)
    if not p.exists():
        raise UserInputError(f"length file {text_path!r} does not exist")
    input_files.regular_file(p, f"length file {text_path!r}", input_files.MAX_DATA_BYTES)
    suffix = p.suffix.lower()
    if suffix in (".csv", ".parquet"):
        import pandas as pd

        try:
            df = pd.read_csv(p) if suffix == ".csv" else pd.read_parquet(p)
        except Exception as err:  # noqa: BLE001 (pandas raises many kinds)
            raise UserInputError(f"cannot read {p.name}: {err}") from None
        col = column or next((c for c in LENGTH_COLUMNS if c in df.columns), None)
        if col is None or col not in df.columns:
            raise UserInputError(f"{p.name}: no length column; name one with #COLUMN or use one of "
                                 f"{', '.join(LENGTH_COLUMNS)} (columns: {', '.join(map(str, df.columns))})")
        values = list(df[col])
        where = [f"{p.name} row {i + 2}" for i in range(len(values))]
    else:
        try:
            # a byte-order mark is no part of line 1
            lines = input_files.read_text(p, f"length file {text_path!r}", "utf-8-sig",
                                          input_files.MAX_DATA_BYTES).splitlines()
        except UnicodeDecodeError as err:
            raise UserInputError(f"length file {p.name} is not UTF-8 text (byte {err.start})") from None
        values, where = [], []
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            if suffix == ".jsonl":
                obj = typed_json.loads_checked(line, f"{p.name} line {i}")
                ids = obj.get("input_ids") if isinstance(obj, dict) else obj
                if not isinstance(ids, list):
                    raise UserInputError(f"{p.name} line {i}: expected a token-id list or {{'input_ids': [...]}}")
                bad = next((t for t in ids if isinstance(t, bool) or not isinstance(t, int) or t < 0), None)
                if bad is not None or (ids and max(ids) >= 2**63):
                    shown = line.strip() if bad is None else typed_json.written(bad)
                    raise UserInputError(f"{p.name} line {i}: token ids must be integers from 0 to 2**63 - 1, "
                                         f"got {shown[:80]}")
                values.append(len(ids))
            else:
                values.append(line.split())
            where.append(f"{p.name} line {i}")
    steps = []
    for value, place in zip(values, where):
        steps.append(tuple(_positive_length(v, place) for v in (value if isinstance(value, list) else [value])))
    if not steps:
        raise UserInputError(f"length file {p.name} holds no lengths")
    return steps


def _positive_length(value, place: str) -> int:
    """A length in [1, MAX_LENGTH] read exactly: a decimal integer (`512`, `1e3` and `512.0` are accepted only
    where they are whole numbers, compared without going through float, so `9007199254740993` stays itself),
    checked before any arithmetic; the error shows the value as written. Written in ASCII digits: Decimal's other
    syntax (`1_000`, digits of other scripts such as `٥١٢`) is refused, as `--documents` refuses it."""
    from decimal import Decimal, InvalidOperation

    text = value if isinstance(value, str) else repr(value)
    plain = text.isascii() and "_" not in text
    try:
        number = Decimal(text.strip()) if plain and not isinstance(value, bool) else Decimal("NaN")
    except InvalidOperation:
        number = Decimal("NaN")
    if not number.is_finite() or number != number.to_integral_value() or not 0 < number <= MAX_LENGTH:
        raise UserInputError(f"{place}: length must be a positive integer (at most 2**40), got {text}")
    return int(number)

