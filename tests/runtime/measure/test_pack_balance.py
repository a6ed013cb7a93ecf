"""`python -m runtime.measure.pack_balance`: the attention balance of packed steps, JSON and errors.

Run: `python -m pytest -q tests/runtime/measure/test_pack_balance.py`.
"""

from __future__ import annotations

import json


def test_pack_balance_command_prints_json(capsys):
    from runtime.measure.pack_balance import main

    assert main(["uniform:512:4096", "--pack-tokens", "8192", "--p", "4", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["causal"] for r in rows] == [True, False]
    for r in rows:
        assert r["steps"] > 0 and r["docs_per_step"] >= 1 and 1.0 <= r["imbalance_mean"] <= r["imbalance_worst"]


def test_pack_balance_command_refuses_a_bad_budget(capsys):
    from runtime.measure.pack_balance import main

    assert main(["uniform:512:4096", "--pack-tokens", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--pack-tokens" in err[0]
