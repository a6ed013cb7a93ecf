"""The replay model on validate-run's executed steps (paradyse_lab/app/replay_closed_loop.py): plans read back from
the train log's short text, every step priced from DIR/kernels/ with the measured dispatch cost, and the steps
in the form `simulator.replay.compare` reads. Synthetic tables and runs of a one-layer model (no timing)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from paradyse_lab.app.replay_closed_loop import options_of_plan, replay_steps
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.errors import UserInputError
from paradyse_lab.simulator.replay import compare


def test_plans_read_back_per_layer_and_per_sublayer():
    ts, me_r = StrategyOption("megatron_ts"), StrategyOption("metp", recompute=True)
    assert options_of_plan("TS,ME+r", 2) == [(ts, ts), (me_r, me_r)]
    assert options_of_plan("TS,ME+r", 1) == [(ts, me_r)]
    with pytest.raises(UserInputError, match="has 3 entries; the model has 2 layers"):
        options_of_plan("TS,TS,TS", 2)


def _folder(tmp_path):
    (tmp_path / "tiny.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 32, "n_head": 4, "n_layer": 1,
                                                    "vocab_size": 64, "n_positions": 64, "torch_dtype": "float32"}))
    k = tmp_path / "kernels"
    k.mkdir()
    (k / "gemm.csv").write_text("m,n,k,dtype,median_s\n16,32,32,float32,1e-5\n64,96,32,float32,4e-5\n")
    (k / "attention.csv").write_text("seq_len,batch,heads,head_dim,causal,fwd_s,bwd_s\n16,1,4,8,true,1e-5,3e-5\n"
                                     "64,1,4,8,true,1e-4,3e-4\n")
    (k / "elementwise.csv").write_text("nbytes,median_s\n100,2e-6\n100000,2e-5\n")
    (k / "dispatch.csv").write_text("serial,dispatch_s,floor_s\ntrue,1e-5,2e-6\n")
    (tmp_path / "validate_run_meta.json").write_text(json.dumps(
        {"p": 2, "dtype": "fp32", "model": str(tmp_path / "tiny.json"), "cluster": "a100-80gb-x8",
         "cost_model": "analytic", "profiles": ""}))
    rows = [{"policy": pol, "repeat": 0, "step": i, "seq_len": s, "step_s": 0.01 * (i + 1), "plan": plan, "loss": 1.0}
            for pol, plan in (("static:megatron_ts", "TS"), ("static:ulysses_z", "UZ"))
            for i, s in enumerate((16, 32, 32))]
    pd.DataFrame(rows).to_csv(tmp_path / "validate_run_measured.csv", index=False)
    return tmp_path


def test_every_executed_step_is_priced_from_the_measured_tables(tmp_path, monkeypatch):
    monkeypatch.setenv("PARADYSE_TRACE_CACHE", str(tmp_path / "traces"))
    steps = replay_steps(_folder(tmp_path), skip=1)
    assert len(steps) == 6 and (steps["predicted_s"] > 1e-5).all() and steps["plan_match"].all()
    for _, g in steps.groupby("policy"):
        assert g["predicted_s"].iloc[1] == g["predicted_s"].iloc[2] > g["predicted_s"].iloc[0]  # same step, longer
        assert list(g["counted"]) == [False, False, True]  # steps after the first `skip` (train counts from 1)
        assert g["predicted_cum_s"].iloc[-1] == pytest.approx(g["predicted_s"].iloc[2])
    result = compare(steps, ["static:megatron_ts", "static:ulysses_z"], [])
    assert set(result["policies"]) == {"static:megatron_ts", "static:ulysses_z"}


def test_a_folder_without_measured_tables_is_refused(tmp_path):
    folder = _folder(tmp_path)
    (folder / "kernels" / "dispatch.csv").unlink()
    with pytest.raises(UserInputError, match="no measured kernel tables"):
        replay_steps(folder, skip=1)
