"""Profile CSVs: schema, validation messages, the synthetic generator and the bundled file."""

import json

import pandas as pd
import pytest

from paradyse_lab.cli import main
from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.costmodel.ablation import split_profiles
from paradyse_lab.costmodel.profiles import COLUMNS, DATA_DIR, default_profile, read_profiles, write_profiles
from paradyse_lab.costmodel.synthetic import length_grid, synthesize_profiles
from paradyse_lab.errors import UserInputError

A100 = get_cluster("a100-80gb-x8")
STAMP = "2026-01-01T00:00:00+00:00"


@pytest.fixture(scope="module")
def small():
    return synthesize_profiles(A100, ("gpt",), ratio=1.1, timestamp=STAMP)


@pytest.fixture(scope="module")
def small_file(small, tmp_path_factory):
    """`small` written once for the module: the fits on a profile file are cached in the process by (file,
    modification time, kind, cluster), so the tests that fit on it share them, as a user's commands in one
    process do."""
    return write_profiles(small, tmp_path_factory.mktemp("small") / "gpt.csv")


def write_bad(tmp_path, df, name="bad.csv"):
    path = tmp_path / name
    df.to_csv(path, index=False)
    return path


def test_round_trip(tmp_path, small):
    path = write_profiles(small, tmp_path / "p.csv")
    back = read_profiles(path)
    assert list(back.columns) == list(COLUMNS) and len(back) == len(small)
    assert back["time_s"].tolist() == pytest.approx(small["time_s"].tolist(), rel=1e-5)
    assert back["peak_bytes"].tolist() == small["peak_bytes"].tolist()
    assert set(back["source"]) == {"analytic"}


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.drop(columns=["time_s", "device"]), "missing columns time_s, device (required: model, h,"),
    (lambda d: d.assign(time_s=d["time_s"].where(d.index != 3, float("nan"))), "line 5: column time_s is empty or NaN"),
    (lambda d: d.assign(time_s=d["time_s"].where(d.index != 0, -1.5)), "line 2: time_s must be > 0"),
    (lambda d: d.assign(peak_bytes=d["peak_bytes"].astype(str).where(d.index != 1, "12.5")),
     "line 3: peak_bytes must be an integer, got '12.5'"),
    (lambda d: d.assign(seq_len=d["seq_len"].where(d.index != 2, 0)), "line 4: seq_len must be > 0"),
    (lambda d: d.assign(strategy=d["strategy"].where(d.index != 0, "fsdp")), "unknown strategy 'fsdp'; valid:"),
    (lambda d: d.assign(source=d["source"].where(d.index != 0, "guess")), "unknown source 'guess'; valid:"),
    (lambda d: d.assign(recompute="maybe"), "recompute must be true or false"),
    (lambda d: d.iloc[:0], "no rows"),
])
def test_bad_profiles_are_rejected_with_a_clear_message(tmp_path, small, edit, message):
    path = write_bad(tmp_path, edit(small.copy()))
    with pytest.raises(UserInputError, match="^bad.csv: ") as err:
        read_profiles(path)
    assert message in str(err.value)


def test_the_same_bytes_are_validated_once_and_every_reader_gets_its_own_rows(tmp_path, small, monkeypatch):
    """A run reads one profile for each learned model and step: read_profiles validates the same bytes under the
    same name once per process, hands each reader a copy, and validates a file whose bytes changed (same
    size, same path) again."""
    from paradyse_lab.costmodel import profiles

    path = write_profiles(small.iloc[:5], tmp_path / "p.csv")
    monkeypatch.setattr(profiles, "_VALIDATED", {})  # nothing this process read before
    validated, real = [], profiles.validate_profiles
    monkeypatch.setattr(profiles, "validate_profiles", lambda df, source: validated.append(source) or real(df, source))
    first = read_profiles(path)
    first.loc[0, "time_s"] = -1.0  # one reader's edit is not another's rows
    again = read_profiles(path)
    assert validated == ["p.csv"] and again["time_s"].tolist() == read_profiles(path)["time_s"].tolist()
    assert again.loc[0, "time_s"] > 0 and validated == ["p.csv"]
    text = path.read_text()
    path.write_text(text.replace(",false,512,1,", ",false,512,2,", 1))  # the first row's batch: same size
    assert path.read_text() != text and len(path.read_text()) == len(text)
    edited = read_profiles(path)
    assert validated == ["p.csv", "p.csv"] and edited.loc[0, "batch"] == 2 and again.loc[0, "batch"] == 1


def test_unreadable_files(tmp_path):
    with pytest.raises(UserInputError, match="not found"):
        read_profiles(tmp_path / "nope.csv")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(UserInputError, match="empty.csv: the file is empty"):
        read_profiles(tmp_path / "empty.csv")


def test_cli_reports_a_bad_profile_in_one_line(tmp_path, capsys, small):
    path = write_bad(tmp_path, small.assign(time_s=-small["time_s"]))
    assert main(["costmodel", "ablate", "--profiles", str(path), "--no-regret"]) == 2
    err = capsys.readouterr().err
    assert "bad.csv: line 2: time_s must be > 0" in err and err.count("\n") == 1


def test_synthetic_profile_is_seeded_and_stops_at_the_first_oom(small):
    again = synthesize_profiles(A100, ("gpt",), ratio=1.1, timestamp=STAMP)
    pd.testing.assert_frame_equal(small, again)
    other = synthesize_profiles(A100, ("gpt",), ratio=1.1, seed=1, timestamp=STAMP)
    assert not small["time_s"].equals(other["time_s"])
    assert (small["peak_bytes"] <= A100.memory_bytes - 2**30).all()
    longest = small.groupby("strategy")["seq_len"].max()
    grid = length_grid(ratio=1.1)
    assert longest["metp"] > longest["megatron_ts"]  # the lean strategy is profiled further
    assert longest["megatron_ts"] < grid[-1]  # cut by its OOM, not by the grid
    noiseless = synthesize_profiles(A100, ("gpt",), ratio=1.1, time_noise=0, mem_noise=0, timestamp=STAMP)
    ratio = small["time_s"] / noiseless["time_s"]
    assert 0.005 < (ratio - 1).abs().mean() < 0.03  # lognormal sigma 0.02: mean |noise| ~ 1.6%


def test_bundled_profile_is_small_valid_and_labelled():
    path = default_profile("a100-80gb-x8")
    assert path == DATA_DIR / "analytic_a100-80gb-x8.csv"
    assert path.stat().st_size < 1_000_000
    df = read_profiles(path)
    assert set(df["source"]) == {"analytic"} and set(df["device"]) == {"a100-80gb-x8"}
    assert {"bert", "llama", "gpt", "llama3-8b"} <= set(df["model"])
    measured = default_profile("h100-80gb-x8")  # measured on an H100 by paradyse_lab.app.measure.gpu_session
    assert measured == DATA_DIR / "measured-rank-local_h100-80gb-x8.csv"
    h100 = read_profiles(measured)
    assert set(h100["source"]) == {"measured-rank-local"} and set(h100["model"]) == {"bert", "llama", "gpt"}
    with pytest.raises(UserInputError, match="no bundled profile for device 'h200-x8'"):
        default_profile("h200-x8")


def test_split_holds_out_inside_and_beyond(small):
    train, interp, extrap = split_profiles(small)
    for strategy, g in small.groupby("strategy"):
        longest = g["seq_len"].max()
        tr = train[train["strategy"] == strategy]["seq_len"]
        it = interp[interp["strategy"] == strategy]["seq_len"]
        ex = extrap[extrap["strategy"] == strategy]["seq_len"]
        assert tr.max() * 2 <= longest and ex.min() * 2 > longest and ex.max() == longest
        assert tr.min() < it.min() and it.max() < tr.max() and not set(it) & set(tr)
    assert len(train) + len(interp) + len(extrap) == len(small)


def test_synth_profile_command(tmp_path, capsys):
    out = tmp_path / "p.csv"
    assert main(["costmodel", "synth-profile", "--out", str(out), "--models", "bert", "--ratio", "1.2",
                 "--timestamp", STAMP]) == 0
    assert "source=analytic" in capsys.readouterr().out
    assert set(read_profiles(out)["model"]) == {"bert"}
    assert main(["costmodel", "synth-profile", "--out", str(out), "--ratio", "1"]) == 2
    assert "--ratio must be a finite number > 1" in capsys.readouterr().err


def test_ablate_costmodel_json_schema(capsys, small_file):
    path = small_file
    assert main(["costmodel", "ablate", "--profiles", str(path), "--size", "3", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["models"]) == {"analytic", "calibrated", "hybrid", "forest", "polynomial", "residual"}
    keys = {"time_mape_interp", "time_mape_extrap", "mem_mape_interp", "mem_mape_extrap", "regret"}
    for name, m in data["models"].items():
        assert set(m) == keys | {"time_mape_by_band", "time_mape_leave_one_shape_out"}, name
        assert all(isinstance(m[k], float) for k in keys), name
        assert m["time_mape_leave_one_shape_out"] is None  # one model shape: nothing to leave out
    assert data["leave_one_shape_out"] == {}
    models = data["models"]
    assert models["analytic"]["regret"] == 1.0 and data["profile_source"] == "analytic"
    assert models["analytic"]["time_mape_interp"] < 0.03  # only the profile's noise
    # A random forest cannot extrapolate: flat beyond the data, far off at 2x; the hybrid's polynomial is not.
    assert models["forest"]["mem_mape_extrap"] > 0.1 > models["hybrid"]["mem_mape_extrap"]
    assert models["forest"]["time_mape_interp"] == models["hybrid"]["time_mape_interp"]
    assert {r["strategy"] for r in data["by_strategy"]} == {"megatron_ts", "megatron_cz", "ulysses_z", "metp"}


def test_the_forest_and_polynomial_taken_from_the_hybrid_fit_predict_as_their_own_fits(small_file):
    """`fit_each` (the ablation and reproduce's costmodel step) and `fit_profile_file` once the file's hybrid
    is fitted (simulated runs) take the forest and the polynomial from the hybrid's fit: the same predictions,
    to the bit, and the same description as fitting each alone."""
    import dataclasses

    import numpy as np

    from paradyse_lab.costmodel.learned_fit import fit_each, fit_profile_file, fit_profiles

    path = small_file
    rows = read_profiles(path)
    fits = fit_each(("hybrid", "forest", "polynomial"), rows, A100)
    hybrid = fit_profile_file("hybrid", path, A100)
    for kind in ("forest", "polynomial"):
        alone = fit_profiles(kind, rows, A100, source_name=str(path))
        from_file = fit_profile_file(kind, path, A100)
        assert from_file.estimators["time_s"] is getattr(hybrid.estimators["time_s"], f"{kind}_")
        assert fit_profile_file(kind, path, A100) is from_file  # cached like any fit on the file
        for fitted in (fits[kind], from_file):
            for got, want in zip(fitted.predict_rows(rows), alone.predict_rows(rows)):
                np.testing.assert_array_equal(got, want)
        described = [{f.name: getattr(fit, f.name) for f in dataclasses.fields(alone) if f.name != "estimators"}
                     for fit in (from_file, alone, dataclasses.replace(fits[kind], profile=str(path)))]
        assert described[0] == described[1] == described[2], kind
