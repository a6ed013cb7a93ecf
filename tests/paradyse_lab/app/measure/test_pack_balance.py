"""`python -m paradyse_lab.app.measure.pack_balance`: the attention balance of packed steps, JSON and errors.

Run: `python -m pytest -q tests/paradyse_lab/app/measure/test_pack_balance.py`.
"""

from __future__ import annotations

import json


def test_pack_balance_command_prints_json(capsys):
    from paradyse_lab.app.measure.pack_balance import main

    assert main(["uniform:512:4096", "--pack-tokens", "8192", "--p", "4", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["causal"] for r in rows] == [True, False]
    for r in rows:
        assert r["steps"] > 0 and r["docs_per_step"] >= 1 and 1.0 <= r["imbalance_mean"] <= r["imbalance_worst"]


def test_pack_balance_command_refuses_a_bad_budget(capsys):
    from paradyse_lab.app.measure.pack_balance import main

    assert main(["uniform:512:4096", "--pack-tokens", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--pack-tokens" in err[0]


def test_per_document_zig_zag_balances_documents_without_padding_exactly(tmp_path):
    """Documents whose lengths are multiples of 2p need no padding: every rank's causal and non-causal
    attention work is the same, step by step; a one-token document's padding unbalances its step a little."""
    from paradyse_lab.app.measure.pack_balance import balance

    path = tmp_path / "lengths.txt"
    path.write_text("4096\n2048\n1024\n512\n8192\n64\n")
    rows = balance(f"file:{path}", 8192, 4, progress=False)
    assert [(r["imbalance_mean"], r["imbalance_worst"], r["padding_per_document"]) for r in rows] == [(1.0, 1.0, 0)] * 2
    path.write_text("4096\n2048\n1\n")
    rows = balance(f"file:{path}", 8192, 4, progress=False)
    assert all(1.0 < r["imbalance_worst"] < 1.001 and r["padding_per_document"] == 7 for r in rows)
