"""Calibration of the analytic model: the fit recovers known parameters, cluster files carry it, the ablation
reports it (leave-one-shape-out)."""

import dataclasses
import json

import numpy as np
import pytest

from paradyse_lab.cli import main
from paradyse_lab.cluster.files import CLUSTERS_DIR, get_cluster, load_cluster_toml
from paradyse_lab.cluster.spec import CALIBRATION_PARAMETERS, StrategyCalibration
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel import AnalyticCostModel, uniform_plan_cost
from paradyse_lab.costmodel.calibration import (
    calibrated_cluster,
    calibration_toml,
    fit_calibration,
    leave_one_shape_out,
    loso_summary,
)
from paradyse_lab.costmodel.factory import build_cost_model
from paradyse_lab.costmodel.learned_fit import analytic_whole
from paradyse_lab.costmodel.profiles import PAPER_PROFILE, read_profiles, validate_profiles
from paradyse_lab.costmodel.synthetic import synthesize_profiles
from paradyse_lab.errors import UserInputError

A100 = get_cluster("a100-80gb-x8")
KNOWN = {
    "megatron_ts": StrategyCalibration(1.3, 0.8, 0.002, 1e-7),
    "megatron_cz": StrategyCalibration(0.9, 1.7, 0.004, 6e-6),
    "ulysses_z": StrategyCalibration(1.1, 1.2, 0.0, 5e-6),
    "metp": StrategyCalibration(1.05, 0.6, 0.04, 0.0),
}


@pytest.fixture(scope="module")
def known_profile():
    """Rows whose times are the analytic model calibrated with KNOWN (no noise), over three model shapes."""
    truth = calibrated_cluster(A100, KNOWN)
    df = synthesize_profiles(truth, ("bert", "paper-7b", "gpt"), time_noise=0.0, mem_noise=0.0, ratio=1.3,
                             max_len=1 << 18, timestamp="2026-01-01T00:00:00+00:00")
    return validate_profiles(df.astype(str))


def test_fit_recovers_known_parameters(known_profile):
    fitted = fit_calibration(known_profile, A100)
    for strategy, known in KNOWN.items():
        for k in CALIBRATION_PARAMETERS:
            assert getattr(fitted[strategy], k) == pytest.approx(getattr(known, k), rel=1e-6, abs=1e-12), (strategy, k)


def test_leave_one_shape_out_is_exact_on_a_calibrated_truth_and_not_for_the_analytic(known_profile):
    summary = loso_summary(leave_one_shape_out(known_profile, A100))
    assert summary["calibrated"]["time_mape_leave_one_shape_out"] < 1e-6
    assert summary["analytic"]["time_mape_leave_one_shape_out"] > 0.05
    assert set(summary["calibrated"]["by_band"]) <= {"<=8K", "8K-64K", ">64K"}
    assert len(summary["calibrated"]["by_shape"]) == 3


def test_leave_one_shape_out_needs_two_shapes(known_profile):
    with pytest.raises(UserInputError, match="at least two model shapes"):
        leave_one_shape_out(known_profile[known_profile.model == "bert"], A100)


def test_calibrated_model_applies_the_parameters_to_the_analytic_parts():
    model = get_model("gpt")
    cal = StrategyCalibration(1.5, 2.0, 0.01, 1e-6)
    plain = AnalyticCostModel(model, A100)
    calibrated = AnalyticCostModel(model, calibrated_cluster(A100, {"metp": cal}))
    opt = StrategyOption("metp")
    for kind in ("attention", "mlp"):
        a, c = plain.sublayer(kind, opt, 65536), calibrated.sublayer(kind, opt, 65536)
        expected = 1.5 * a.compute_s + 2.0 * a.exposed_comm_s + (0.01 + 1e-6 * model.hidden) / 2
        assert c.time_s == pytest.approx(expected)
        assert (c.kept_bytes, c.transient_bytes) == (a.kept_bytes, a.transient_bytes)  # memory is not calibrated
    ts = StrategyOption("megatron_ts")  # not calibrated: analytic
    assert calibrated.sublayer("mlp", ts, 4096).time_s == plain.sublayer("mlp", ts, 4096).time_s
    assert (plain.name, calibrated.name) == ("analytic", "calibrated")


def test_cluster_file_round_trip(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(calibration_toml(A100, KNOWN, "a100-80gb-x8", "test"))
    loaded = load_cluster_toml(path)
    assert loaded.calibration == KNOWN and loaded.name == "mine"
    assert dataclasses.replace(loaded, name=A100.name, calibration={}) == A100


@pytest.mark.parametrize("table, message", [
    ('[calibration.zero9]\ncompute_scale = 1.0', "unknown strategy in bad.toml calibration 'zero9'"),
    ('[calibration.metp]\nspeed = 1.0', "unknown key in bad.toml calibration.metp 'speed'"),
    ('[calibration.metp]\ncomm_scale = -1.0', "calibration.comm_scale must be a finite number >= 0"),
    ('[calibration.metp]\ncomm_scale = "fast"', "calibration.comm_scale must be a finite number >= 0"),
    ('[calibration.metp]\ncomm_scale = nan', "calibration.comm_scale must be a finite number >= 0"),
    ('calibration = 3', "calibration must be a table"),
])
def test_bad_calibration_tables_are_user_errors(tmp_path, table, message):
    path = tmp_path / "bad.toml"
    path.write_text(f'base = "a100-80gb-x8"\n{table}\n')
    with pytest.raises(UserInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_cluster_toml(path)


def test_bundled_paper_calibration_is_the_fit_on_the_bundled_paper_profile():
    bundled = get_cluster("a100-80gb-x8-paper")
    assert (CLUSTERS_DIR / "a100-80gb-x8-paper.toml").is_file()
    fitted = fit_calibration(read_profiles(PAPER_PROFILE), A100)
    assert set(bundled.calibration) == set(fitted)
    for strategy, c in fitted.items():
        for k in CALIBRATION_PARAMETERS:
            assert getattr(bundled.calibration[strategy], k) == pytest.approx(getattr(c, k), rel=1e-9, abs=1e-15)


def test_calibrated_cost_model_fits_the_profile_when_the_cluster_has_no_calibration():
    model = get_model("bert")
    cm = build_cost_model("calibrated", model, A100, profiles=PAPER_PROFILE)
    assert cm.name == "calibrated" and "paper_a100-80gb-x8.csv" in cm.label
    preset = build_cost_model("calibrated", model, get_cluster("a100-80gb-x8-paper"))
    opt = StrategyOption("ulysses_z")
    assert uniform_plan_cost(cm, opt, 8192).total_time_s == pytest.approx(
        uniform_plan_cost(preset, opt, 8192).total_time_s, rel=1e-9)
    # calibrated on the measurements, the model is closer to them than the analytic model at short lengths
    df = read_profiles(PAPER_PROFILE)
    short = df[(df.model == "bert") & (df.seq_len <= 8192)].reset_index(drop=True)
    err = {name: np.mean(np.abs(analytic_whole(short, c)[0] - short.time_s) / short.time_s)
           for name, c in (("analytic", A100), ("calibrated", get_cluster("a100-80gb-x8-paper")))}
    assert err["calibrated"] < err["analytic"] / 2


def test_ablate_costmodel_json_reports_calibrated_and_leave_one_shape_out(capsys):
    argv = ["costmodel", "ablate", "--profiles", str(PAPER_PROFILE), "--cost-models", "analytic,calibrated,polynomial",
            "--no-regret", "--format", "json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    for name in ("analytic", "calibrated"):
        loso = out["models"][name]["time_mape_leave_one_shape_out"]
        assert 0 < loso < 1
        assert loso == pytest.approx(out["leave_one_shape_out"][name]["time_mape_leave_one_shape_out"])
        assert set(out["leave_one_shape_out"][name]["by_strategy"]) == {"megatron_ts", "megatron_cz", "ulysses_z",
                                                                         "metp"}
        assert set(out["models"][name]["time_mape_by_band"]) == {"<=8K", "8K-64K", ">64K"}
    assert out["models"]["polynomial"]["time_mape_leave_one_shape_out"] is None
    assert out["models"]["calibrated"]["time_mape_leave_one_shape_out"] < out["models"]["analytic"][
        "time_mape_leave_one_shape_out"]
    assert out["profile_source"] == "paper"


def test_fit_calibration_cli_writes_a_cluster_file_every_command_takes(tmp_path, capsys):
    out = tmp_path / "cal.toml"
    assert main(["costmodel", "fit-calibration", "--profiles", str(PAPER_PROFILE), "--out", str(out), "--format",
                 "json"]) == 0
    capsys.readouterr()
    assert main(["cost", "--model", "gpt", "--seq", "8K", "--cluster", str(out), "--format", "json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["cost_model"].startswith("calibrated (cal:")
    assert main(["costmodel", "fit-calibration", "--out", str(tmp_path / "x.txt")]) == 2
    assert "must name a .toml file" in capsys.readouterr().err


def test_ablate_costmodel_takes_the_cluster_file_beside_a_measured_profile(tmp_path, capsys):
    from paradyse_lab.costmodel.profiles import DATA_DIR, write_profiles

    # every 8th length of gpt's rows (72 of 558): the ablation only has to run for the cluster it reports
    rows = read_profiles(DATA_DIR / "analytic_a100-80gb-x8.csv").query("model == 'gpt' and seq_len % 4096 == 0")
    rows = rows.assign(device="cpu x86_64")
    write_profiles(rows, tmp_path / "profile.csv")
    argv = ["costmodel", "ablate", "--profiles", str(tmp_path / "profile.csv"), "--cost-models", "analytic",
            "--no-regret", "--format", "json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["cluster"] == "a100-80gb-x8"  # nothing beside it: the default
    (tmp_path / "cluster.toml").write_text('base = "a100-80gb-x8"\nmemory_gib = 70\n')
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["cluster"] == "cluster"  # what calibrate wrote beside it


def test_rows_priced_again_on_an_equal_cluster_reuse_its_models_and_cost_what_fresh_models_cost():
    """`row_cost_models`' analytic models share their computed costs between calls on equal clusters (an ablation
    prices the same rows for its fits, its predictions and leave-one-shape-out): the costs are those of a fresh
    model to the bit, and a cluster that differs (a calibration) gets costs of its own."""
    from paradyse_lab.costmodel.learned_fit import model_of_row, row_cost_models

    df = read_profiles(PAPER_PROFILE)
    df = df[df["seq_len"] <= 16384].reset_index(drop=True)
    first = [cm for _, cm in row_cost_models(df, A100)]
    again = [cm for _, cm in row_cost_models(df, dataclasses.replace(A100))]  # equal, not the same object
    assert all(a._cache is b._cache and a._calls is b._calls for a, b in zip(first, again))
    times, peaks = analytic_whole(df, A100)
    for i, r in enumerate(df.itertuples(index=False)):
        spec = model_of_row(r.model, r.h, r.heads, r.kv_heads, r.layers, getattr(r, "causal", None))
        fresh = AnalyticCostModel(spec, A100, int(r.p))
        u = uniform_plan_cost(fresh, StrategyOption(r.strategy, bool(r.recompute)), int(r.seq_len), int(r.batch))
        assert (times[i], peaks[i]) == (u.total_time_s, u.peak_bytes)
    calibrated = get_cluster("a100-80gb-x8-paper")
    assert not {id(cm._cache) for _, cm in row_cost_models(df, calibrated)} & {id(cm._cache) for cm in first}
    assert (analytic_whole(df, calibrated)[0] != times).any()
