"""Flags generated from options dataclasses (paradyse_lab/options.py), and the train and profile commands built on
them (paradyse_lab/cli/train_command.py, profile_command.py).

Run: `python -m pytest -q tests/runtime/test_options.py`.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field

import pytest

from paradyse_lab.app.measure.profiler import ProfileOptions
from paradyse_lab.app.train_options import TrainOptions
from paradyse_lab.cli.profile_command import add_arguments as add_profile_arguments
from paradyse_lab.cli.train_command import add_arguments as add_train_arguments
from paradyse_lab.cli.train_command import options_from_args
from paradyse_lab.options import add_dataclass_arguments, field_docs, from_namespace, integer, number


@dataclass(frozen=True)
class Example:
    """A command's options."""

    name: str
    """Which one."""
    count: int = 3
    """How many
    (two lines)."""
    ratio: float = 0.5
    fast: bool = False
    """Go fast."""
    progress: bool = True
    """A bar."""
    kind: str = field(default="a", metadata={"choices": ("a", "b")})
    """The kind."""
    sizes: tuple[int, ...] = field(default="1,2", metadata={"type": str})
    """Comma-separated sizes."""


class _Raising(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(message)


def _parser(cls=Example) -> argparse.ArgumentParser:
    parser = _Raising()
    add_dataclass_arguments(parser, cls)
    return parser


def test_docstrings_under_fields_are_read_from_the_source():
    assert field_docs(Example) == {"name": "Which one.", "count": "How many (two lines).", "fast": "Go fast.",
                                   "progress": "A bar.", "kind": "The kind.", "sizes": "Comma-separated sizes."}


def test_flags_have_the_fields_types_defaults_and_docstrings():
    actions = {a.dest: a for a in _parser()._actions}
    assert actions["name"].required and actions["name"].option_strings == ["--name"]
    assert (actions["count"].type, actions["count"].default) == (integer, 3)  # int() reads "1_000", "\u0663"
    assert (actions["ratio"].type, actions["ratio"].default, actions["ratio"].help) == (number, 0.5, None)
    assert actions["fast"].option_strings == ["--fast"] and actions["fast"].default is False
    assert actions["progress"].option_strings == ["--no-progress"] and actions["progress"].default is True
    assert actions["kind"].choices == ("a", "b")
    assert actions["sizes"].type is None and actions["sizes"].default == "1,2"  # parsed by the command
    assert actions["count"].help == "How many (two lines) (default %(default)s)"
    assert actions["fast"].help == "Go fast."


def test_a_float_flag_keeps_the_text_typed_for_messages():
    """A float flag's value is the float, shown as typed (`TypedFloat`): 1e400 is refused as 1e400, not as inf."""
    import pickle

    value = _parser().parse_args(["--name", "x", "--ratio", "1e400"]).ratio
    assert value == float("inf") and repr(value) == str(value) == f"{value}" == "1e400"
    assert value * 1 == float("inf") and type(value * 1) is float  # arithmetic: plain floats
    assert pickle.loads(pickle.dumps(value)).text == "1e400"  # sent to the ranks of --nproc N as typed
    with pytest.raises(ValueError, match="invalid number value: 'fast'"):
        _parser().parse_args(["--name", "x", "--ratio", "fast"])


def test_from_namespace_round_trips():
    args = _parser().parse_args(["--name", "x", "--count", "7", "--fast", "--no-progress", "--kind", "b"])
    assert from_namespace(Example, args, sizes=(4, 8)) == Example(name="x", count=7, fast=True, progress=False,
                                                                   kind="b", sizes=(4, 8))
    assert from_namespace(Example, _parser().parse_args(["--name", "y"])) == Example(name="y", sizes="1,2")
    with pytest.raises(ValueError, match="invalid choice"):
        _parser().parse_args(["--name", "x", "--kind", "c"])
    with pytest.raises(ValueError, match="required"):
        _parser().parse_args([])


@pytest.mark.parametrize("cls, add", [(TrainOptions, add_train_arguments), (ProfileOptions, add_profile_arguments)])
def test_every_option_field_is_a_flag_with_help(cls, add):
    """A field added to TrainOptions or ProfileOptions is a flag of its command, with its docstring as help."""
    parser = argparse.ArgumentParser()
    add(parser)
    by_dest = {a.dest: a for a in parser._actions}
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        assert f.name in by_dest, f.name
        assert docs[f.name] and by_dest[f.name].help.startswith(docs[f.name].rstrip(".")), f.name


def test_train_flags_give_the_options_they_name():
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    args = parser.parse_args(["--model", "gpt2-tiny", "--dataset", "uniform:64:128", "--steps", "3", "--lr", "0.01",
                              "--recompute", "--no-progress", "--max-len", "128", "--checkpoint-every", "2"])
    assert options_from_args(args) == TrainOptions(model="gpt2-tiny", dataset="uniform:64:128", steps=3, lr=0.01,
                                                   recompute=True, progress=False, max_len=128, checkpoint_every=2)
    defaults = parser.parse_args(["--model", "gpt2-tiny", "--dataset", "uniform:64:128"])
    assert options_from_args(defaults) == TrainOptions(model="gpt2-tiny", dataset="uniform:64:128")


def test_the_train_help_is_the_commands_own():
    """`paradyse-lab train --help` describes a run in the command line's own words (the options' module and the
    runtime's training loop have library docstrings of their own)."""
    from paradyse_lab.cli import build_parser, descriptions

    sub = next(a for a in build_parser("train")._actions if isinstance(a, argparse._SubParsersAction))
    assert sub.choices["train"].description == descriptions.TRAIN
    assert "--pack-tokens" in descriptions.TRAIN


@pytest.mark.parametrize("text", ["1_000", "\u0663", "+3", "007", "-0", "0x10", "1e3", "", "\uff12"])
def test_an_integer_flag_takes_ascii_digits_only(text):
    """int() reads '1_000', '\u0663', '+3', '007' and '-0' as 1000, 3, 3, 7 and 0, which every later message then
    shows instead of what was typed: the flag refuses them (argparse's one-line error quotes the text)."""
    with pytest.raises(argparse.ArgumentTypeError, match="invalid integer value"):
        integer(text)
    assert integer("400") == 400 and integer(" -5 ") == -5 and integer("0") == 0


@pytest.mark.parametrize("text", ["1_000", "\u0661", "\u0660.\u0665", "0x1p3", "1e", "", "\uff15"])
def test_a_float_flag_takes_ascii_digits_only(text):
    """float() reads '1_000', '\u0661' and '\u0660.\u0665' as 1000.0, 1.0 and 0.5 (a --lr or --gamma the user
    cannot see): refused; decimal, exponent and inf/nan forms are taken as typed."""
    with pytest.raises(argparse.ArgumentTypeError, match="invalid number value"):
        number(text)
    assert [str(number(t)) for t in ("0.5", "-1e-3", ".5", "5.", "1E400", "-inf", "NaN")] == [
        "0.5", "-1e-3", ".5", "5.", "1E400", "-inf", "NaN"]
