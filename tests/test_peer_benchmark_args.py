"""examples/peer_benchmark.py refuses bad arguments with one line and exit status 2, before starting any rank.

Run: `python -m pytest -q tests/test_peer_benchmark_args.py`. (The benchmark itself is a command that prints a
table; its numbers are not asserted by tests.)
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "peer_benchmark.py"


def _module():
    spec = importlib.util.spec_from_file_location("peer_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("argv, field", [(["--lengths", "abc"], "--lengths"), (["--lengths", "2046"], "--lengths"),
                                         (["--lengths", ""], "--lengths"), (["--repeats", "0"], "--repeats")])
def test_bad_arguments_are_one_line_and_exit_2(argv, field, capsys, monkeypatch):
    module = _module()
    monkeypatch.setattr(module.launch, "launch", lambda *a, **k: pytest.fail("a rank was started"))
    assert module.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and field in err[0]


def test_the_pairs_name_each_strategy_and_peer():
    module = _module()
    assert [ours for ours, _, _ in module.PAIRS[2]] == ["megatron_ts", "ulysses_z", "megatron_cz"]
    assert module.PAIRS[2][2][2] is module.peer_blocks.fsdp_ring  # megatron_cz: FSDP2 + ring attention
    assert module.PAIRS[1][0][2] is None  # p = 1: the plain block
