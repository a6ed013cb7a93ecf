"""User-facing errors: the CLI prints these as one line and exits with code 2, no traceback."""

import math


class UserInputError(ValueError):
    """A mistake in what the user asked for (unknown name, bad number, unsplittable shape).

    The message names the field and, where there is a closed set, the allowed values.
    """


class RunStopped(RuntimeError):
    """A run stopped on purpose (training diverged, a rank failed): one line on stderr, exit code 1."""


def unknown_name(field: str, value: str, allowed) -> UserInputError:
    """Build the error for a name outside a closed set, listing the valid names."""
    names = ", ".join(sorted(allowed))
    return UserInputError(f"unknown {field} {value!r}; valid: {names}")


def require_positive_int(field: str, value, maximum: int | None = None) -> int:
    """Return `value` as an int if it is a positive integer (at most `maximum`), else raise naming the field."""
    if isinstance(value, bool):
        raise UserInputError(f"{field} must be a positive integer, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or value <= 0:
        raise UserInputError(f"{field} must be a positive integer, got {value!r}")
    if maximum is not None and value > maximum:
        raise UserInputError(f"{field} must be at most {maximum:,}, got {value}")  # as given: no separators
    return value


MAX_REPEATS = 10_000
"""Most repeats (or warm-up steps) of a measurement a command accepts."""
MAX_SEED = 2**63 - 1
"""Largest seed: a signed 64-bit integer (numpy's generators take any integer >= 0)."""


def require_seed(field: str, value) -> int:
    """Return `value` if it is an integer seed in [0, MAX_SEED] (checked before numpy sees it), else raise naming
    the field and showing the value as given."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise UserInputError(f"{field} must be an integer from 0 to 2**63 - 1, got {value!r}")
    return value


def require_number(field: str, value, low: float = 0.0, high: float = float("inf"),
                   low_open: bool = False) -> float:
    """Return `value` as a float if it is finite and in [low, high] ((low, high] with `low_open`)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = float("nan")
    if isinstance(value, bool) or not math.isfinite(x) or x < low or (low_open and x == low) or x > high:
        bound = f"{'>' if low_open else '>='} {low:g}" + (f" and <= {high:g}" if high != float("inf") else "")
        raise UserInputError(f"{field} must be a finite number {bound}, got {value!r}")
    return x
