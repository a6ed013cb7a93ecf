"""JSON read as the user wrote it: integers exact, numbers remembered as typed, fields checked for type and range.

`loads(text)` is `json.loads` whose non-integer numbers (`64.9`, `1e400`, `NaN`) are `WrittenNumber`s: floats
that keep their text, so a message can show `1e400` rather than `inf`; integers stay Python ints (exact at any
size, never through float). `written(value)` is a value as it appears in JSON. The `*_field` readers take a
field of a JSON object, check its JSON type (a bool is a JSON `true`/`false`, an integer a JSON integer: not
`64.9`, not `64.0`, not `"64"`) and its range before any arithmetic, and raise `UserInputError` with one line
naming the field and the value as written.
"""

from __future__ import annotations

import json
import math
import sys

from paradyse_lab.errors import UserInputError

MISSING = object()
"""`default` of a field that must be present."""


class WrittenNumber(float):
    """A JSON number with a fraction or exponent (or NaN / Infinity), as a float that keeps its text (its
    repr); also what the cluster TOML reader gives for TOML floats."""

    text: str

    def __new__(cls, text: str):
        number = super().__new__(cls, text)
        number.text = text
        return number

    def __repr__(self) -> str:
        return self.text


def loads(text: str):
    """`json.loads` with non-integer numbers kept as `WrittenNumber` (module docstring)."""
    return json.loads(text, parse_float=WrittenNumber, parse_constant=WrittenNumber)


def loads_checked(text: str, where: str):
    """`loads(text)`, or a one-line `UserInputError` starting with `where` when `text` is not JSON Python can
    read: malformed ("not JSON"), nested deeper than the interpreter's recursion limit, or holding an integer of
    more digits than int() converts (sys.get_int_max_str_digits(), 4,300 by default): json.loads raises a
    RecursionError or a plain ValueError for those two, not a JSONDecodeError."""
    try:
        return loads(text)
    except json.JSONDecodeError as err:
        raise UserInputError(f"{where}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    except RecursionError:
        raise UserInputError(f"{where}: not JSON Python can read (arrays or objects nested too deep)") from None
    except ValueError:
        raise UserInputError(f"{where}: not JSON Python can read (an integer of more than "
                             f"{sys.get_int_max_str_digits():,} digits)") from None


def written(value) -> str:
    """`value` as JSON shows it: `true`, `null`, `"false"`, `64.9`, `1e400` (the text of a `WrittenNumber`)."""
    if isinstance(value, WrittenNumber):
        return value.text
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _refuse(where: str, key: str, value, rule: str) -> UserInputError:
    return UserInputError(f"{where}: {key} must be {rule}, got {written(value)}")


def int_field(obj: dict, key: str, where: str, *, low: int = 1, high: int = 2**31 - 1, default=MISSING,
              null_is_default: bool = True) -> int:
    """The JSON integer `obj[key]` in [low, high]; `default` when absent (or null)."""
    value = obj.get(key, MISSING)
    if value is MISSING or (value is None and null_is_default):
        if default is MISSING:
            raise UserInputError(f"{where}: missing key {key!r}")
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _refuse(where, key, value, f"an integer in [{low}, {high}]")
    return value


def number_field(obj: dict, key: str, where: str, *, default, positive: bool = True) -> float:
    """The finite JSON number `obj[key]` (> 0 when `positive`); `default` when absent or null."""
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or (
            positive and value <= 0):
        raise _refuse(where, key, value, "a finite number > 0" if positive else "a finite number")
    return float(value)


def bool_field(obj: dict, key: str, where: str, *, default: bool) -> bool:
    """The JSON `true` / `false` `obj[key]`; `default` when absent or null."""
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _refuse(where, key, value, "true or false")
    return value


def str_field(obj: dict, key: str, where: str, *, default: str, allowed=None) -> str:
    """The JSON string `obj[key]` (one of `allowed` when given); `default` when absent or null."""
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, str) or (allowed is not None and value not in allowed):
        rule = "a string" if allowed is None else "one of " + ", ".join(json.dumps(a) for a in allowed)
        raise _refuse(where, key, value, rule)
    return value


def object_field(obj: dict, key: str, where: str) -> dict:
    """The JSON object `obj[key]`; {} when absent or null."""
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _refuse(where, key, value, "a JSON object or null")
    return value
