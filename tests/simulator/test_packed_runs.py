"""Simulated runs of packed workloads: every policy, exact equality with one document per step, the JSON."""

import json

import pandas as pd
import pytest

from paradyse_lab.cli import main
from paradyse_lab.costmodel.packed import PackedStep
from paradyse_lab.simulator.engine import ROW_COLUMNS
from paradyse_lab.simulator.experiments import Setup, run_one

SETUP = Setup(size=40)


@pytest.mark.parametrize("policy", ["static:megatron_ts", "static:metp+recompute", "restart:megatron_ts",
                                    "dynamic:heuristic", "dynamic:dp+recompute+sublayer"])
def test_every_policy_runs_a_packed_workload(policy, capsys, tmp_path):
    out = tmp_path / "rows.csv"
    assert main(["simulate", "--model", "gpt", "--dataset", "github_code", "--size", "40", "--policy", policy,
                 "--pack-tokens", "65536", "--format", "json", "--out", str(out)]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = pd.read_csv(out)
    assert list(rows.columns) == list(ROW_COLUMNS)
    trained = rows[~rows["oom"]]
    assert data["tokens_trained"] == trained["tokens"].sum() > 0
    assert data["max_seq_len_trained"] == trained["seq_len"].max()
    assert (rows["padded_len"] % 16 == 0).all() and (rows["padded_len"] - rows["tokens"]).between(0, 15).all()
    assert (rows["documents"] > 1).any()  # packs of several documents were trained or tried
    if not rows["oom"].any():
        assert trained["documents"].sum() == 40


def test_one_document_per_step_equals_the_unpacked_run():
    """--pack-tokens 1: every document over the budget, a step alone: the unpacked run, step for step."""
    for policy in ("dynamic:dp", "static:ulysses_z"):
        plain = run_one(SETUP, "llama", "grch38", policy)
        packed = run_one(Setup(size=40, pack_tokens=1), "llama", "grch38", policy)
        same = [c for c in ROW_COLUMNS if c not in ("solve_ms", "cached")]
        pd.testing.assert_frame_equal(plain[same], packed[same])


def test_a_packed_run_is_cheaper_per_token_and_trains_the_same_documents():
    plain = run_one(SETUP, "bert", "github_code", "static:megatron_cz", truth_cost_model="paper")
    packed = run_one(Setup(size=40, pack_tokens=32768), "bert", "github_code", "static:megatron_cz",
                     truth_cost_model="paper")
    assert not plain["oom"].any() and not packed["oom"].any()
    assert plain["tokens"].sum() == packed["tokens"].sum() and len(packed) < len(plain)
    # the fixed cost of a ZeRO-3 step (its weight gathers) is paid once per pack, not once per document
    assert packed["cumulative_time_s"].iloc[-1] < plain["cumulative_time_s"].iloc[-1]


def test_simulate_refuses_bad_packing(capsys):
    for argv, match in ((["--pack-tokens", "0"], "--pack-tokens must be a positive integer"),
                        (["--pack-tokens", "8", "--pack-order", "zigzag"], "--pack-order must be one of")):
        assert main(["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "static:metp"] + argv) == 2
        assert match in capsys.readouterr().err
    assert PackedStep((5,), 16).padding == 11


def test_experiment_packing_command(tmp_path, capsys, monkeypatch):
    from paradyse_lab.simulator import packing_experiment

    monkeypatch.setattr(packing_experiment, "DATASETS", ("grch38",))  # one panel keeps it quick
    monkeypatch.setattr(packing_experiment, "MODELS", ("llama",))
    assert main(["experiment", "packing", "--size", "8", "--out", str(tmp_path), "--format", "json"]) == 0
    rows = pd.DataFrame(json.loads(capsys.readouterr().out)["packing"])
    written = pd.read_csv(tmp_path / "packing.csv")
    key = ["pack_tokens", "policy", "steps", "tokens_trained", "max_doc_trained"]
    assert rows[key].values.tolist() == written[key].values.tolist()
    setup = written[["truth", "cluster", "size", "seed", "reserve_bytes"]].drop_duplicates().values.tolist()
    assert setup == [["analytic", "a100-80gb-x8", 8, 0, 2**30]]  # each row names its setup (the A100 reserve: 1 GiB)
    assert sorted(rows.pack_tokens.unique()) == [0, 32768, 131072] and len(rows) == 3 * 6
    assert (tmp_path / "figures" / "packing.png").stat().st_size > 1000
    assert (rows.padding_tokens < 16 * rows.steps.clip(lower=1)).all()  # padded once per step, to 2p = 16
    finished = rows[rows.finished]
    assert (finished.tokens_trained == finished.tokens_trained.max()).all()  # the same documents, however packed
    one = rows[rows.pack_tokens == 0].set_index("policy")
    assert (one.steps[one.finished] == 8).all()
