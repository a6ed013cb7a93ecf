"""`costmodel ablate` with the replay model on a slice of the bundled H100 profile (two shapes, megatron_ts):
the model is reported beside the analytic one, inside, beyond and leaving one shape out, and it is closer to
the measurements than the analytic model where the analytic model misses most (dispatch-bound short steps).

Run: `python -m pytest -q tests/paradyse_lab/app/test_replay_ablation.py` (traces bert's and llama's layers once
into a temporary cache: about a minute on a quiet core).
"""

from __future__ import annotations

import json

import pandas as pd

from paradyse_lab.cli import main
from paradyse_lab.costmodel.profiles import default_profile


def test_replay_is_reported_beside_the_analytic_model(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PARADYSE_TRACE_CACHE", str(tmp_path / "cache"))
    df = pd.read_csv(default_profile("h100-80gb-x8"))
    part = df[df["model"].isin(["bert", "llama"]) & (df["strategy"] == "megatron_ts") & ~df["recompute"]]
    part.to_csv(tmp_path / "profile.csv", index=False)
    argv = ["costmodel", "ablate", "--profiles", str(tmp_path / "profile.csv"), "--cluster", "h100-80gb-x8",
            "--cost-models", "analytic,replay", "--no-regret", "--format", "json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    replay, analytic = out["models"]["replay"], out["models"]["analytic"]
    for key in ("time_mape_interp", "time_mape_extrap", "time_mape_leave_one_shape_out"):
        assert 0 <= replay[key] < analytic[key], (key, replay[key], analytic[key])
    assert replay["mem_mape_interp"] == analytic["mem_mape_interp"]  # memory is the analytic model's
    assert out["replay"]["tables"] == "bundled h100-80gb-x8 tables" and out["replay"]["dispatch_s"] > 0
    assert set(out["leave_one_shape_out"]["replay"]["by_strategy"]) == {"megatron_ts"}
