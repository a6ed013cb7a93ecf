import importlib
import io
import json
import subprocess
import sys
from contextlib import redirect_stdout

import pytest

from paradyse_lab.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command, needle", [
    ("models", "gpt2-tiny"), ("clusters", "a100-80gb-x8 (default)"), ("strategies", "colossal_z"),
])
def test_catalog_tables_and_json(capsys, command, needle):
    code, out, _ = run(capsys, command)
    assert code == 0 and needle in out
    code, out, _ = run(capsys, command, "--format", "json")
    assert code == 0 and needle.split()[0] in json.loads(out)


def test_a_command_process_freezes_what_it_leaves_before_it_exits(monkeypatch, capsys):
    """`paradyse-lab COMMAND` as a process (arguments from sys.argv, the console script's call) freezes what is
    alive before it returns its code, so that the interpreter's exit does not walk it all again; main(argv)
    (tests, scripts) leaves the garbage collector alone."""
    import gc

    import paradyse_lab.runtime.launch.local
    import paradyse_lab.runtime.launch.ranks

    frozen, ended = [], []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    # This process joined no group, whatever an earlier test in it did: main() would otherwise end it (os._exit).
    monkeypatch.setattr(paradyse_lab.runtime.launch.ranks, "_joined_group", [])
    monkeypatch.setattr(paradyse_lab.runtime.launch.local, "end_process", ended.append)
    monkeypatch.setattr(sys, "argv", ["paradyse-lab", "strategies", "--format", "json"])
    assert main() == 0 and frozen == [True] and ended == []
    monkeypatch.setattr(sys, "argv", ["paradyse-lab", "cost", "--model", "gpt", "--seq", "0"])
    assert main() == 2 and frozen == [True, True]  # a refused input ends the same way
    assert main(["strategies", "--format", "json"]) == 0 and frozen == [True, True]
    capsys.readouterr()


def test_a_training_rank_freezes_what_its_imports_left_before_it_trains(monkeypatch):
    """`train`'s rank function (a spawned rank's, a torchrun rank's) freezes what is alive, torch imported, before
    it joins its group and trains: the collector's later full passes skip it."""
    import gc

    import paradyse_lab.runtime.launch.ranks
    from paradyse_lab.cli import train_command

    calls = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(paradyse_lab.runtime.launch.ranks, "run_rank",
                        lambda r, w, fn, args, port: calls.append((r, w, port)))
    train_command._init_and_train(1, 2, None, 1234)
    assert calls == ["freeze", (1, 2, 1234)]


def test_cost_json_schema(capsys):
    code, out, _ = run(capsys, "cost", "--model", "gpt", "--seq", "64K", "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert data["model"] == "gpt" and data["cluster"] == "a100-80gb-x8" and data["seq_len"] == 65536
    assert set(data["strategies"]) == {"megatron_ts", "megatron_cz", "ulysses_z", "metp"}
    row = data["strategies"]["metp"]
    for key, kind in [("time_s_per_layer", float), ("kept_bytes_per_layer", int), ("transient_bytes", int),
                      ("model_state_bytes", int), ("peak_bytes", int), ("fits", bool),
                      ("comm_bytes_per_layer", dict)]:
        assert isinstance(row[key], kind), key
    assert set(row["comm_bytes_per_layer"]) == {"p2p", "all_reduce"}
    peaks = {n: r["peak_bytes"] for n, r in data["strategies"].items()}
    assert min(peaks, key=peaks.get) == "metp"


def test_cost_table_with_recompute(capsys):
    code, out, _ = run(capsys, "cost", "--model", "bert", "--seq", "8192", "--recompute",
                       "--strategies", "metp,megatron_ts")
    assert code == 0 and "metp+recompute" in out and "megatron_ts+recompute" in out and "fits" in out


@pytest.mark.parametrize("argv, match", [
    (["cost", "--model", "nope", "--seq", "512"], "unknown model 'nope'; valid: "),
    (["cost", "--model", "gpt", "--cluster", "tpu", "--seq", "512"], "unknown cluster 'tpu'"),
    (["cost", "--model", "gpt", "--seq", "0"], "--seq must be a positive integer"),
    (["cost", "--model", "gpt", "--seq", "1.5"], "--seq must be a positive integer"),
    (["cost", "--model", "gpt", "--seq", "abc"], "--seq must be a positive integer"),
    (["cost", "--model", "gpt", "--seq", "512", "--strategies", "zero"], "unknown strategy 'zero'"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, match):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert match in err and err.count("\n") == 1 and "Traceback" not in err


def test_plan_refuses_bad_input_before_building_its_solver(capsys, monkeypatch):
    """`plan` checks its input (here a --budget-gb beyond range) before it builds the solver, whose start-up
    (the dp solver's compiled kernels) takes a second."""
    from paradyse_lab import solvers

    built: list[str] = []
    monkeypatch.setattr(solvers, "get_solver", built.append)
    code, out, err = run(capsys, "plan", "--model", "gpt", "--seq", "4096", "--budget-gb", "1e30")
    assert code == 2 and "--budget-gb" in err and built == []


@pytest.fixture(scope="module")
def console_help():
    """`python -X importtime -m paradyse_lab --help` run once: the console entry's help on stdout, and on stderr
    (-X importtime) every module the process imported."""
    return subprocess.run([sys.executable, "-X", "importtime", "-m", "paradyse_lab", "--help"], capture_output=True,
                          text=True, timeout=120)


def test_console_script_exits_2_without_traceback(console_help):
    proc = subprocess.run([sys.executable, "-m", "paradyse_lab", "cost", "--model", "x", "--seq", "8"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "valid:" in proc.stderr
    assert console_help.returncode == 0 and "cost" in console_help.stdout


def test_building_the_parser_loads_no_heavy_library(console_help):
    """`paradyse-lab --help` builds the whole parser (every command, each its own module's part): it must not
    load scikit-learn, scipy, joblib, pandas or torch (they cost seconds of start-up; each command imports what
    it needs when it runs). The modules loaded: what `-X importtime` lists (one line per module, its name last)."""
    from paradyse_lab.cli import COMMAND_MODULES

    assert console_help.returncode == 0, console_help.stderr[-2000:]
    assert all(name in console_help.stdout for names in COMMAND_MODULES.values() for name in names)  # every command
    loaded = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in console_help.stderr.splitlines()
              if line.startswith("import time:") and line.count("|") == 2}
    assert "paradyse_lab" in loaded and "argparse" in loaded  # the listing is read
    heavy = [m for m in ("sklearn", "scipy", "joblib", "pandas", "torch") if m in loaded]
    assert heavy == [], f"loaded while building the parser: {heavy}"


def _help_text(parser, name: str) -> str:
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        parser.parse_args([name, "--help"])
    return out.getvalue()


def test_each_command_parses_alike_with_only_its_module():
    """main() builds only the named command's module (COMMAND_MODULES in paradyse_lab/cli): each module adds
    exactly the commands listed for it, the whole parser holds them all in that order, and each command's
    --help (every flag, its default and help) and a parsed namespace are the same with either parser."""
    from paradyse_lab.cli import COMMAND_MODULES, OneLineParser, build_parser

    whole = build_parser()
    choices = next(a for a in whole._actions if a.dest == "command").choices
    assert list(choices) == [name for names in COMMAND_MODULES.values() for name in names]
    for module, names in COMMAND_MODULES.items():
        alone = OneLineParser(prog="x").add_subparsers(dest="command")
        importlib.import_module(f"paradyse_lab.cli.{module}").register(alone)
        assert sorted(alone.choices) == sorted(names), module
        for name in names:
            assert _help_text(build_parser(name), name) == _help_text(whole, name), name
    argv = ["plan", "--model", "gpt", "--seq", "4096", "--solver", "dp"]
    assert vars(build_parser("plan").parse_args(argv)) == vars(whole.parse_args(argv))
