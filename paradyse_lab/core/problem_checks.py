"""The value checks of `SearchProblem`'s fields, each raising a `UserInputError`
that names the field and the allowed values: [rows, cols] matrices of finite values >= 0 (`matrix`: float64
seconds or exact int64 bytes), byte counts from 0 to 2**63 - 1 (`nonneg_int`), finite seconds >= 0
(`finite_seconds`). A JSON document may hold integers of any size: the checks name those past int64 or float64
rather than let numpy overflow.
"""

from __future__ import annotations

import math

import numpy as np

from paradyse_lab.errors import UserInputError

INT64_MAX = 2**63 - 1
"""Byte counts are exact int64."""
FLOAT64_MAX = int(np.finfo(np.float64).max)
"""Seconds are float64: a larger JSON integer cannot be converted."""


def is_int(x) -> bool:
    """A Python or numpy integer, not a bool."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def finite_seconds(field_name: str, value) -> float:
    """A number of seconds: finite, >= 0 and within float64 (a JSON integer may be of any size)."""
    seconds = None
    if not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating)):
        try:
            seconds = float(value)
        except OverflowError:
            raise UserInputError(f"{field_name} must be a finite number >= 0, got an integer of "
                                 f"{len(str(abs(int(value))))} digits (past float64)") from None
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        raise UserInputError(f"{field_name} must be a finite number >= 0, got {value!r}")
    return seconds


def nonneg_int(field_name: str, value) -> int:
    """A byte count: an integer (a whole float or a numpy integer accepted) from 0 to 2**63 - 1, as an int."""
    if isinstance(value, (np.integer,)):
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not is_int(value) or value < 0 or value > INT64_MAX:
        raise UserInputError(f"{field_name} must be an integer from 0 to 2**63 - 1, got {value!r}")
    return value


def matrix(name: str, value, kind: str, rows: int | None, cols: int) -> np.ndarray:
    """`value` (a list of rows, as JSON gives it, or an array) as a read-only [rows, cols] copy of finite
    values >= 0: int64 when kind is 'int', else float64. rows None: any positive count."""
    dtype = np.int64 if kind == "int" else np.float64
    what = (f"{name} must be a list of {rows if rows is not None else 'L'} rows of {cols} "
            f"{'integers' if kind == 'int' else 'numbers'}")
    if isinstance(value, np.ndarray):
        if value.ndim != 2 or value.shape[1] != cols or (rows is not None and value.shape[0] != rows):
            raise UserInputError(f"{what} (got an array of shape {list(value.shape)})")
        if kind == "int" and value.dtype.kind == "f" and not np.all(np.mod(value[np.isfinite(value)], 1) == 0):
            raise UserInputError(f"{what} (got fractional values)")
    else:
        if not isinstance(value, (list, tuple)) or (rows is not None and len(value) != rows):
            got = len(value) if isinstance(value, (list, tuple)) else type(value).__name__
            raise UserInputError(f"{what} (got {got} rows)")
        for i, row in enumerate(value):
            if not isinstance(row, (list, tuple, np.ndarray)) or len(row) != cols:
                has = len(row) if isinstance(row, (list, tuple, np.ndarray)) else "no list"
                raise UserInputError(f"{what} (row {i} has {has})")
            for j, x in enumerate(row):
                ok = is_int(x) or (isinstance(x, (float, np.floating)) and (kind != "int" or float(x).is_integer()))
                if kind == "int" and ok and not -INT64_MAX <= x <= INT64_MAX:
                    raise UserInputError(f"{name}[{i}][{j}] is {x!r}, past 2**63 - 1 bytes")
                if kind != "int" and is_int(x) and abs(x) > FLOAT64_MAX:
                    raise UserInputError(f"{what} ({name}[{i}][{j}] is an integer of {len(str(abs(int(x))))} "
                                         "digits, past float64)")
                if not ok:
                    raise UserInputError(f"{what} ({name}[{i}][{j}] is {x!r})")
    arr = np.array(value, dtype=dtype, copy=True).reshape(-1, cols)  # [rows, cols]
    if not np.all(np.isfinite(arr)) or (arr < 0).any():
        raise UserInputError(f"{name} must hold finite values >= 0")
    return arr
