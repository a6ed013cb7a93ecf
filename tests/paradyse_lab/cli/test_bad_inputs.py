"""Every command answers bad input with one line on stderr and exit code 2, never a traceback.

The cases (tests/paradyse_lab/cli/bad_input_cases.py) run in this process through the CLI's `main`, so an uncaught
exception fails the test with its traceback; `train --nproc 2` cases go through `paradyse-lab train`'s
`main`, whose launcher checks them before it spawns a rank.
"""

from __future__ import annotations

import pytest
from bad_input_cases import CASES, ENV_CASES, NPROC2_CASES, SWEEP_CASES, make_fixtures

from paradyse_lab.cli import main


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-inputs")
    make_fixtures(root)
    return root


def _one_line_exit_2(capsys, run, argv):
    try:
        code = run(argv)
    except SystemExit as done:  # argparse exits itself
        code = done.code
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, (code, err[-2000:])
    assert len(lines) == 1 and ": error: " in lines[0], err[-2000:]
    return lines[0]


def _every_command() -> set[str]:
    """Every command the CLI's parser has, as a user types it: `VERB`, or `NOUN TOOL` for a grouped one."""
    from paradyse_lab.cli import build_parser

    top = next(a for a in build_parser()._actions if a.dest == "command")
    commands = set()
    for name, parser in top.choices.items():
        tools = next((a for a in parser._actions if a.dest == "tool"), None)
        commands |= {f"{name} {tool}" for tool in tools.choices} if tools else {name}
    return commands


def test_there_are_at_least_60_cases_over_every_command():
    from paradyse_lab.cli import NOUNS

    assert len(CASES) + len(NPROC2_CASES) >= 60 and len(ENV_CASES) + len(SWEEP_CASES) >= 60
    commands = {" ".join(argv[:2]) if argv[0] in NOUNS else argv[0] for _, argv in CASES if argv}
    every = _every_command()
    assert {"costmodel profile", "solvers solve", "cost"} <= every  # grouped ones by their two words
    assert every <= commands, sorted(every - commands)  # every command has bad inputs here


@pytest.mark.parametrize("argv", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_prints_one_line_and_exits_2(capsys, folder, argv):
    _one_line_exit_2(capsys, main, [a.replace("{d}", str(folder)) for a in argv])


@pytest.mark.parametrize("argv", [c[1] for c in NPROC2_CASES], ids=[c[0] for c in NPROC2_CASES])
def test_bad_input_under_nproc_2_prints_one_line_and_exits_2(capsys, folder, argv):
    from paradyse_lab.cli.train_command import main as train_main

    _one_line_exit_2(capsys, train_main, [a.replace("{d}", str(folder)) for a in argv])


@pytest.mark.parametrize("env, argv", [c[1:] for c in ENV_CASES], ids=[c[0] for c in ENV_CASES])
def test_bad_environment_prints_one_line_and_exits_2(capsys, monkeypatch, folder, env, argv):
    """torchrun's variables with --nproc (the ranks would wait forever for peers), or malformed ones: one line
    showing the value as set, exit 2, before any rank starts."""
    from paradyse_lab.runtime.launch.ranks import _ENV

    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    line = _one_line_exit_2(capsys, main, [a.replace("{d}", str(folder)) for a in argv])
    assert any(name in line for name in env), line


@pytest.mark.parametrize("argv, shown", [c[1:] for c in SWEEP_CASES], ids=[c[0] for c in SWEEP_CASES])
def test_bad_field_or_number_shows_the_value_as_written(capsys, folder, argv, shown):
    """config.json and cluster TOML fields, length and token files, numbers beyond float range or above 2**53,
    negative or zero: one line naming the field or showing the value as written (never a converted one), exit 2."""
    line = _one_line_exit_2(capsys, main, [a.replace("{d}", str(folder)) for a in argv])
    assert shown.replace("{d}", str(folder)) in line, line


def test_what_an_ascii_terminal_cannot_show_is_escaped_not_a_traceback(folder, monkeypatch, tmp_path):
    """stdout and stderr set to ASCII (LANG=C, PYTHONIOENCODING=ascii, a pipe): `lengths --out` a non-ASCII path
    writes its file and prints the path escaped, exit 0 (it wrote the file, then ended in a UnicodeEncodeError
    traceback); a one-line error quoting non-ASCII input stays one line."""
    import io
    import sys

    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="ascii") for _ in range(2))
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    target = tmp_path / "caf\u00e9.txt"
    assert main(["data", "lengths", str(folder / "texts"), "--out", str(target)]) == 0
    assert main(["cost", "--model", "gpt", "--documents", "4K,\u0662K"]) == 2
    out.flush()
    err.flush()
    assert target.read_text() == "12\n" and "caf\\xe9.txt" in out.buffer.getvalue().decode("ascii")
    assert err.buffer.getvalue().decode("ascii").splitlines() == [
        "paradyse-lab cost: error: --documents must be a positive integer in ASCII digits (e.g. 4096 or 4K), got "
        "'\\u0662K'"]
