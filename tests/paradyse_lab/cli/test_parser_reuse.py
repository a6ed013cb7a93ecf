"""`main` builds each command's parser once per process: the parser it reuses parses every command as a parser
built afresh does, after any number of earlier parses, refused ones included."""

from __future__ import annotations

import pytest

from paradyse_lab.cli import _command_of, build_parser

ARGVS = [
    ["cost", "--model", "gpt", "--seq", "4096", "--recompute", "--format", "json"],
    ["plan", "--model", "gpt", "--seq", "4096", "--solver", "dp", "--strategies", "metp,megatron_ts"],
    ["plan", "--model", "llama3-70b", "--cluster", "h100-80gb-x8", "--max-length"],
    ["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "dynamic_dp", "--size", "4"],
    ["experiment", "table5", "--out", "x", "--size", "4", "--fine-lengths"],
    ["train", "--model", "gpt2-tiny", "--dataset", "uniform:16:16", "--steps", "2", "--no-progress"],
    ["costmodel", "ablate", "--profiles", "x.csv", "--no-regret"],
    ["data", "lengths", "texts", "--out", "lengths.txt", "--pack-tokens", "64"],
    ["catalog", "models", "--format", "json"],
    ["solvers", "compare", "--model", "gpt", "--seqs", "4096,8192"],
    ["export-hf", "--checkpoint", "ck", "--out", "hf", "--max-shard-size", "5MB"],
]
REFUSED = [["cost", "--model"], ["plan", "--seq", "-1e-3x"], ["train", "--steps"], ["simulate", "--nope"]]


def test_the_reused_parser_is_the_one_built():
    assert build_parser("cost") is build_parser("cost") and build_parser() is build_parser()


@pytest.mark.parametrize("argv", ARGVS, ids=lambda a: "-".join(a[:2]))
def test_a_reused_parser_parses_as_a_fresh_one_after_other_parses(argv):
    command = _command_of(argv)
    fresh = vars(build_parser.__wrapped__(command).parse_args(argv))
    for parser in (build_parser(command), build_parser()):
        for bad in REFUSED:
            if _command_of(bad) == command or parser is build_parser():
                with pytest.raises(SystemExit):
                    parser.parse_args(bad)
        first = vars(parser.parse_args(argv))
        first_copy = dict(first)
        assert vars(parser.parse_args(argv)) == first_copy == fresh
