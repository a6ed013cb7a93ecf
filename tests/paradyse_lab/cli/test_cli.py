import argparse
import importlib
import io
import json
import re
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
    code, out, _ = run(capsys, "catalog", command)
    assert code == 0 and needle in out
    code, out, _ = run(capsys, "catalog", command, "--format", "json")
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
    monkeypatch.setattr(sys, "argv", ["paradyse-lab", "catalog", "strategies", "--format", "json"])
    assert main() == 0 and frozen == [True] and ended == []
    monkeypatch.setattr(sys, "argv", ["paradyse-lab", "cost", "--model", "gpt", "--seq", "0"])
    assert main() == 2 and frozen == [True, True]  # a refused input ends the same way
    assert main(["catalog", "strategies", "--format", "json"]) == 0 and frozen == [True, True]
    capsys.readouterr()


def test_a_training_rank_freezes_what_its_imports_left_before_it_trains(monkeypatch):
    """`train`'s rank function (a spawned rank's, a torchrun rank's) freezes what is alive, torch imported, before
    it joins its group and trains: the collector's later full passes skip it."""
    import gc

    from paradyse_lab.cli import train_command

    calls = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(train_command, "run_rank",
                        lambda r, w, fn, args, port, timeout_s: calls.append((r, w, port, timeout_s)))
    train_command._init_and_train(1, 2, None, 1234, 7.0)
    assert calls == ["freeze", (1, 2, 1234, 7.0)]


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
    from paradyse_lab.cli import solver_commands  # imported before the patch: it binds get_solver when imported

    built: list[str] = []
    monkeypatch.setattr(solver_commands, "get_solver", built.append)
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
    from paradyse_lab.cli import NOUNS, VERBS

    assert console_help.returncode == 0, console_help.stderr[-2000:]
    assert all(name in console_help.stdout for name in (*VERBS, *NOUNS))  # every command and group
    loaded = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in console_help.stderr.splitlines()
              if line.startswith("import time:") and line.count("|") == 2}
    assert "paradyse_lab" in loaded and "argparse" in loaded  # the listing is read
    heavy = [m for m in ("sklearn", "scipy", "joblib", "pandas", "torch") if m in loaded]
    assert heavy == [], f"loaded while building the parser: {heavy}"


def _help_text(parser, name: str) -> str:
    """`--help` of the command a module registers as `name`, typed as the tree spells it."""
    from paradyse_lab.cli import SPELLING

    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        parser.parse_args([*SPELLING[name].split(), "--help"])
    return out.getvalue()


def test_each_command_parses_alike_with_only_its_module():
    """main() builds only the named command's module (COMMAND_MODULES in paradyse_lab/cli): each module adds
    exactly the commands listed for it, the whole parser holds the verbs and the nouns in --help's order, and
    each command's --help (every flag, its default and help) and a parsed namespace are the same with either
    parser."""
    from paradyse_lab.cli import COMMAND_MODULES, NOUNS, VERBS, OneLineParser, build_parser

    whole = build_parser()
    listed = next(a for a in whole._actions if a.dest == "command")._choices_actions
    assert [a.dest for a in listed] == [*VERBS, *NOUNS]
    for module, names in COMMAND_MODULES.items():
        alone = OneLineParser(prog="x").add_subparsers(dest="command")
        importlib.import_module(f"paradyse_lab.cli.{module}").register(alone)
        assert sorted(alone.choices) == sorted(names), module
        for name in names:
            assert _help_text(build_parser(name), name) == _help_text(whole, name), name
    for argv in (["plan", "--model", "gpt", "--seq", "4096", "--solver", "dp"],
                 ["costmodel", "ablate", "--profiles", "x.csv", "--no-regret"]):
        assert vars(build_parser(_command_of(argv)).parse_args(argv)) == vars(whole.parse_args(argv))


def _command_of(argv):
    from paradyse_lab.cli import _command_of as command_of

    return command_of(argv)


def test_the_top_level_help_fits_a_screen():
    """`paradyse-lab --help` at most 40 lines at 80 columns: the main verbs and the nouns that group the rest."""
    from paradyse_lab.cli import build_parser

    parser = build_parser()
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=80)
    lines = parser.format_help().splitlines()
    assert len(lines) <= 40, "\n".join(lines)


FORMER = {
    "models": ["catalog", "models"], "clusters": ["catalog", "clusters"], "strategies": ["catalog", "strategies"],
    "workload": ["data", "workload", "grch38", "--size", "20"],
    "lengths": ["data", "lengths", "{d}/texts", "--tokenizer", "bytes", "--out", "{d}/lengths.txt"],
    "ablate-costmodel": ["costmodel", "ablate", "--profiles", "paradyse_lab/data/profiles/paper_a100-80gb-x8.csv",
                         "--no-regret", "--format", "json"],
    "profile": ["costmodel", "profile", "--model", "gpt2-tiny", "--seqs", "64", "--strategies", "megatron_ts",
                "--mode", "rank-local", "--p", "2", "--layers", "1", "--repeats", "1", "--warmup", "0", "--out",
                "{d}/profile.csv"],
    "synth-profile": ["costmodel", "synth-profile", "--models", "bert", "--ratio", "2", "--out", "{d}/synth.csv"],
    "paper-profile": ["costmodel", "paper-profile", "--out", "{d}/paper.csv"],
    "fit-costmodel": ["costmodel", "fit", "--kind", "polynomial", "--profiles", "{d}/paper.csv", "--out",
                      "{d}/poly.joblib"],
    "fit-calibration": ["costmodel", "fit-calibration", "--profiles", "{d}/paper.csv", "--out", "{d}/cal.toml"],
    "solve": ["solvers", "solve", "--problem", "{d}/problem.json", "--solver", "dp"],
    "compare-solvers": ["solvers", "compare", "--model", "gpt", "--seqs", "4K,8K"],
    "bench-solvers": ["solvers", "bench", "--sizes", "8", "--options", "2", "--instances", "1", "--kinds", "random",
                      "--out", "{d}/bench.csv"],
}
"""Each command that moved under a noun (its former name) -> its new spelling with options that run."""


CHEAP = ("models", "clusters", "strategies", "workload", "lengths", "solve")
"""The former commands this test also runs (the others' new spellings run in their own modules' tests)."""


def test_every_moved_command_keeps_its_options_under_its_new_spelling(capsys, tmp_path):
    """Each former command's new spelling parses to what its module's own parser made of the same options
    under the former name (the same function, every option alike), the cheap ones run (exit 0), and the
    former name answers with one line naming the new spelling, exit 2."""
    from paradyse_lab.cli import COMMAND_MODULES, NOUNS, VERBS, OneLineParser, build_parser

    moved = {name for _, tools in NOUNS.values() for name in tools if name not in VERBS}
    assert set(FORMER) == moved
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("one two three\n")
    (tmp_path / "problem.json").write_text(json.dumps({
        "layers": 2, "options": ["a", "b"], "time_s": [[1, 2], [2, 1]], "kept_bytes": [[1, 1], [1, 1]],
        "transient_bytes": [[0, 0], [0, 0]], "fixed_bytes": 0, "budget_bytes": 10}))
    whole = build_parser()
    for former, spelled in FORMER.items():
        argv = [a.replace("{d}", str(tmp_path)) for a in spelled]
        module = next(m for m, names in COMMAND_MODULES.items() if former in names)
        alone = OneLineParser(prog="x")
        importlib.import_module(f"paradyse_lab.cli.{module}").register(alone.add_subparsers(dest="command"))
        before = vars(alone.parse_args([former, *argv[2:]]))
        after = vars(whole.parse_args(argv))
        assert after.pop("command") == " ".join(spelled[:2]) and after.pop("tool") == spelled[1]
        assert before.pop("command") == former and after == before, former
        if former in CHEAP:
            code, _, err = run(capsys, *argv)
            assert code == 0, (former, err[-2000:])
        code, _, err = run(capsys, former)
        assert code == 2 and err.strip() == (f"paradyse-lab: error: '{former}' is now "
                                             f"'paradyse-lab {' '.join(spelled[:2])}' (see --help)"), err


CODE_PLACE = re.compile(r"[\w./-]*\.py\b|\b(?:paradyse_lab|runtime|solvers|simulator|tests|docs|examples)/[\w./-]*"
                        r"|(?<![\w/])figures/[\w.-]*\.py|\bparadyse_lab\.[\w.]+|\b(?:runtime|solvers|simulator)\.[a-z_]+")
"""A `.py` file, a folder of the repository, or a module's dotted name."""


def _every_parser(parser, name="paradyse-lab"):
    """(`paradyse-lab ...` spelling, parser) for the top level, every noun and every command under it."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word, sub in action.choices.items():
                yield from _every_parser(sub, f"{name} {word}")


def test_no_help_text_names_a_source_file_or_a_repository_path():
    """Every --help says what a command and a flag do in the user's words, never where the code lives."""
    from paradyse_lab.cli import build_parser

    assert CODE_PLACE.search("see runtime/training/loop.py")
    assert CODE_PLACE.search("paradyse_lab.core.strategies.step_length")
    found = {}
    for name, parser in _every_parser(build_parser()):
        places = sorted({m.group(0) for m in CODE_PLACE.finditer(parser.format_help())})
        if places:
            found[name] = places
    assert found == {}


def test_the_docs_command_reference_is_current():
    """docs/cli.md's generated part is what the parsers say now (regenerate: `python -m paradyse_lab.cli.reference
    --write docs/cli.md`), and it lists every command."""
    from pathlib import Path

    from paradyse_lab.cli import SPELLING
    from paradyse_lab.cli.reference import page_with_reference

    page = (Path(__file__).resolve().parents[3] / "docs" / "cli.md").read_text(encoding="utf-8")
    assert page_with_reference(page) == page
    assert all(f"### `paradyse-lab {spelling}`" in page for spelling in SPELLING.values())
