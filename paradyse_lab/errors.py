"""User-facing errors: the CLI prints these as one line and exits with code 2, no traceback."""


class UserInputError(ValueError):
    """A mistake in what the user asked for (unknown name, bad number, unsplittable shape).

    The message names the field and, where there is a closed set, the allowed values.
    """


def unknown_name(field: str, value: str, allowed) -> UserInputError:
    """Build the error for a name outside a closed set, listing the valid names."""
    names = ", ".join(sorted(allowed))
    return UserInputError(f"unknown {field} {value!r}; valid: {names}")


def require_positive_int(field: str, value) -> int:
    """Return `value` as an int if it is a positive integer, else raise naming the field."""
    if isinstance(value, bool):
        raise UserInputError(f"{field} must be a positive integer, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or value <= 0:
        raise UserInputError(f"{field} must be a positive integer, got {value!r}")
    return value
