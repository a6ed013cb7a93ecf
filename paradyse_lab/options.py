"""Command-line flags generated from an options dataclass, and the dataclass read back from parsed flags.

A command's options are written once, as fields of a frozen dataclass with a docstring under each field;
`add_dataclass_arguments(parser, cls)` adds one `--flag` per field (the field name with `-` for `_`), with
the field's type (a float as a `TypedFloat`, which error messages show as typed) and default, and the field's
docstring as the help text (read from the class source with `ast`, since Python keeps no field docstrings at
runtime). A field without a default is a required flag; a
bool field is a switch (`--name` sets True; a field defaulting to True is given as `--no-name`). What the
docstring cannot say goes in `field(metadata=...)`: `choices`, `flag` (another flag name), `type` (what the
flag parses when it differs from the field's, e.g. `str` for a comma-separated tuple that the command
parses and checks), `default` (the flag's default when the field has none). `from_namespace(cls, args)`
builds the dataclass from the parsed arguments.

One tree, composed: a field whose type is itself an options dataclass (with a `default_factory`) adds that
dataclass's flags to the same command, and `from_namespace` builds it back (e.g. `simulate` and `experiment`
share `SimulationOptions`). `metadata`: `positional` (a positional
argument instead of a flag), `metavar`. Example (`paradyse-lab train --help` shows the result):

    @dataclass(frozen=True)
    class TrainOptions:
        steps: int = 100
        \"\"\"Optimizer steps in total.\"\"\"

    add_dataclass_arguments(parser, TrainOptions)      # --steps STEPS  Optimizer steps in total. (default 100)
    opts = from_namespace(TrainOptions, parser.parse_args())
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import re
import textwrap
import typing

from paradyse_lab.files.typed_json import WrittenNumber

_SCALARS = {"int": int, "float": float, "str": str, "bool": bool}


class TypedFloat(WrittenNumber):
    """A float read from the command line that keeps the text it was read from (a `WrittenNumber`, whose `repr`
    is that text; here its `str` too), so `--lr 1e400` is refused as `got 1e400`, not as the `inf` it became.
    Arithmetic on it gives plain floats; JSON writes its value."""

    __str__ = WrittenNumber.__repr__

    def __reduce__(self):  # pickled to the ranks of `train --nproc N` as the text it was read from
        return TypedFloat, (self.text,)


_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|infinity|nan)", re.IGNORECASE | re.ASCII)
"""A float flag's text: decimal or exponent notation in ASCII digits, or inf / infinity / nan (any case)."""
_INTEGER = re.compile(r"0|-?[1-9]\d*", re.ASCII)
"""An integer flag's text: ASCII digits, a '-' for a negative one, no '+', leading zeros or separators."""


def number(text: str) -> TypedFloat:
    """argparse's `type` for a float flag (`TypedFloat`; argparse names it in its error: 'invalid number value').
    Only `_NUMBER`, around spaces: Python's float() also takes digits of other scripts ('\u0661' as 1.0) and
    underscores ('1_000'), which would be used silently as another value than the one the user sees."""
    if not _NUMBER.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"invalid number value: {text!r} (a number in ASCII digits, e.g. 0.5 or "
                                         "1e-3)")
    return TypedFloat(text.strip())


def integer(text: str) -> int:
    """argparse's `type` for an integer flag: `_INTEGER` only (around spaces), so a value is shown in any later
    message exactly as typed. Python's int() also takes '1_000', digits of other scripts ('\u0663' as 3), '+5',
    '007' and '-0', which every message then showed as another number (1000, 3, 5, 7, 0) than the one typed."""
    if not _INTEGER.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"invalid integer value: {text!r} (a whole number in ASCII digits without "
                                         "'+', leading zeros or separators, e.g. 400)")
    return int(text)


@functools.cache
def field_docs(cls) -> dict[str, str]:
    """Field name -> its docstring (the string literal right under the field in the class body), one line."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):  # no source shipped (a frozen build): flags without help, same behaviour
        return {}
    body = tree.body[0].body
    docs = {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


@functools.cache
def _type_hints(cls) -> dict[str, object]:
    """`typing.get_type_hints(cls)`, evaluated once per options class (it evaluates every field's annotation
    string: asked per field, every parser built evaluated each class's annotations once per field)."""
    return typing.get_type_hints(cls)


def _field_type(cls, f: dataclasses.Field):
    meta = f.metadata.get("type")
    if meta is not None:
        return meta
    hint = _type_hints(cls).get(f.name, f.type)
    if isinstance(hint, str):
        hint = _SCALARS.get(hint, str)
    return hint if hint in (int, float, str, bool) else str


def flag_of(f: dataclasses.Field) -> str:
    """The flag of a field: metadata `flag`, else `--no-NAME` for a bool defaulting to True, else `--NAME`."""
    if "flag" in f.metadata:
        return f.metadata["flag"]
    name = f.name.replace("_", "-")
    return f"--no-{name}" if f.default is True else f"--{name}"


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls, *, help_suffix: dict[str, str] | None = None,
                            skip: tuple[str, ...] = ()) -> None:
    """One flag per field of the dataclass `cls` (in field order; `skip` names fields left out). The help is the
    field's docstring, then `help_suffix[field]` when given (e.g. a list of names known only at run time),
    then the default (unless it is '' or None: the docstring says what that means)."""
    docs, suffix = field_docs(cls), help_suffix or {}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        nested = _nested(cls, f)
        if nested is not None:
            add_dataclass_arguments(parser, nested, help_suffix=help_suffix, skip=skip)
            continue
        kind = _field_type(cls, f)
        text = " ".join(t for t in (docs.get(f.name, ""), suffix.get(f.name, "")) if t).replace("%", "%%")
        has_default = f.default is not dataclasses.MISSING or "default" in f.metadata
        default = f.metadata.get("default", f.default)
        if kind is bool and f.type in ("bool", bool) and "type" not in f.metadata:
            action = "store_false" if default is True else "store_true"
            parser.add_argument(flag_of(f), dest=f.name, action=action, help=text)
            continue
        kwargs = {"type": {float: number, int: integer}.get(kind, kind)} if kind is not str else {}
        if "choices" in f.metadata:
            kwargs["choices"] = tuple(f.metadata["choices"])
        if "metavar" in f.metadata:
            kwargs["metavar"] = f.metadata["metavar"]
        if f.metadata.get("positional"):
            parser.add_argument(f.name, help=text or None, **kwargs)
            continue
        if has_default:
            shown = f" (default {default_text})" if (default_text := _shown(default)) else ""
            kwargs.update(default=default, help=(text.rstrip(".") + shown) if text else None)
        else:
            kwargs.update(required=True, help=text or None)
        parser.add_argument(flag_of(f), dest=f.name, **kwargs)


def _shown(default) -> str:
    """The default as the help shows it ('' for an empty string or None: the docstring says what that means)."""
    return "" if default in ("", None) else "%(default)s"


def _nested(cls, f: dataclasses.Field):
    """The options dataclass a field holds (its flags are the command's too), or None."""
    hint = _type_hints(cls).get(f.name, f.type)
    return hint if dataclasses.is_dataclass(hint) and isinstance(hint, type) else None


def from_namespace(cls, args: argparse.Namespace, **values):
    """An instance of the dataclass `cls` from parsed arguments (nested options dataclasses built from the same
    arguments); `values` replace fields (e.g. parsed tuples)."""
    fields = {}
    for f in dataclasses.fields(cls):
        nested = _nested(cls, f)
        if nested is not None:
            fields[f.name] = from_namespace(nested, args)
        elif hasattr(args, f.name):
            fields[f.name] = getattr(args, f.name)
    return cls(**{**fields, **values})
