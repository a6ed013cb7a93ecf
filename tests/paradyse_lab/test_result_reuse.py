"""Reused results are keyed on their settings and the code version; every output is written atomically."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from paradyse_lab.app.reproduce import reproduce
from paradyse_lab.app.reproduce_outputs import STEP_OUTPUTS
from paradyse_lab.app.reproduce_planner_steps import step_costmodel
from paradyse_lab.app.reproduce_settings import QUICK_SIZE, SETTINGS_FILE, Settings, profile_for
from paradyse_lab.app.reproduce_steps import STEP_FUNCS, STEPS
from paradyse_lab.files.atomic_write import write_text_atomic
from paradyse_lab.results import result_key
from paradyse_lab.simulator import experiments
from paradyse_lab.simulator.results import run_path

ROOT = Path(__file__).resolve().parents[2]


def _fake_steps(monkeypatch, calls: list, kill: str = ""):
    """Replace every reproduce step by one that writes its outputs as `size=N` (and records the call)."""

    def make(name):
        def step(out, s, force, timings=None):
            calls.append((name, s.size))
            if name == kill:
                raise KeyboardInterrupt
            for f in STEP_OUTPUTS.get(name, ("REPORT.md",)):
                write_text_atomic(out / f, f"size\n{s.size}\n")
        return step

    for name in STEPS:
        monkeypatch.setitem(STEP_FUNCS, name, make(name))


def _sizes(out: Path) -> set[int]:
    return {int(pd.read_csv(out / f)["size"].iloc[0]) for fs in STEP_OUTPUTS.values() for f in fs}


def test_reproduce_reuses_only_steps_made_with_the_same_settings(tmp_path, monkeypatch):
    calls: list = []
    _fake_steps(monkeypatch, calls)
    reproduce(tmp_path, quick=True, progress=False, log=lambda m: None)
    assert _sizes(tmp_path) == {QUICK_SIZE}
    _fake_steps(monkeypatch, calls, kill="table5")  # a full run killed in its second step
    with pytest.raises(KeyboardInterrupt):
        reproduce(tmp_path, quick=False, progress=False, log=lambda m: None)
    calls.clear()
    _fake_steps(monkeypatch, calls)
    reproduce(tmp_path, quick=False, progress=False, log=lambda m: None)
    assert _sizes(tmp_path) == {200}  # no quick-run table under a full run's report
    assert ("fig2", 200) not in calls and ("table5", 200) in calls  # the completed full step was reused
    assert json.loads((tmp_path / SETTINGS_FILE).read_text())["size"] == 200


def test_reproduce_recomputes_a_truncated_or_missing_file_and_new_code(tmp_path, monkeypatch):
    calls: list = []
    _fake_steps(monkeypatch, calls)
    reproduce(tmp_path, quick=True, progress=False, log=lambda m: None)
    (tmp_path / "solver_bench.csv").write_text("si")  # truncated
    (tmp_path / "plan_map.csv").unlink()
    calls.clear()
    reproduce(tmp_path, quick=True, progress=False, log=lambda m: None)
    # the two steps rewrite their CSVs as they were, so the figures drawn from them stay
    assert {c[0] for c in calls} == {"solvers", "plan_map", "report"}
    assert _sizes(tmp_path) == {QUICK_SIZE}
    calls.clear()
    (tmp_path / "paper").mkdir(exist_ok=True)
    (tmp_path / "paper" / "extra.csv").write_text("a\n1\n")  # a CSV the figures may read changed
    reproduce(tmp_path, quick=True, progress=False, log=lambda m: None)
    assert {c[0] for c in calls} == {"figures", "report"}
    calls.clear()
    monkeypatch.setattr(result_key, "code_version", lambda: "edited sources")
    reproduce(tmp_path, quick=True, progress=False, log=lambda m: None)
    assert {c[0] for c in calls} == set(STEPS)


@pytest.mark.parametrize("change", [{"size": 5}, {"seed": 1}])
def test_experiment_runs_are_keyed_on_size_and_seed(tmp_path, change):
    kw = dict(models=("bert",), datasets=("grch38",), exact=False, progress=False)
    experiments.fig2(experiments.Setup(size=3), tmp_path, **kw)
    path = run_path(tmp_path, "fig2", "grch38", "bert", "static:metp")
    first = pd.read_csv(path)
    experiments.fig2(experiments.Setup(**{"size": 3, **change}), tmp_path, **kw)
    again = pd.read_csv(path)
    fresh = experiments.run_one(experiments.Setup(**{"size": 3, **change}), "bert", "grch38", "static:metp")
    assert len(again) == len(fresh) and list(again["seq_len"]) == list(fresh["seq_len"])
    assert list(first["seq_len"]) != list(again["seq_len"])


# ---- atomic writes: a crash half way through leaves the previous file whole -----------------------------


def _crash_half_way(target, *args, **kwargs):
    """Write a partial file to the handle or path given, then fail like a killed writer."""
    import io

    if hasattr(target, "write"):
        binary = isinstance(target, (io.BytesIO, io.BufferedIOBase)) or "b" in getattr(target, "mode", "")
        target.write(b"partial" if binary else "partial")
    else:
        Path(target).write_bytes(b"partial")
    raise RuntimeError("killed half way")


def _figure(tmp_path, monkeypatch):
    import matplotlib.figure

    sys.path.insert(0, str(ROOT / "figures"))
    import _common

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, target, **kw: _crash_half_way(target))
    out = tmp_path / "figs"
    out.mkdir()
    (out / "demo.png").write_bytes(b"good")
    import matplotlib.pyplot as plt

    with pytest.raises(RuntimeError):
        _common.run("demo", lambda args: plt.figure(), ["--out", str(out)], "demo")
    return out / "demo.png"


def _joblib(tmp_path, monkeypatch):
    import joblib

    from paradyse_lab.costmodel import regressors

    target = tmp_path / "m.joblib"
    target.write_bytes(b"good")
    monkeypatch.setattr(joblib, "dump", lambda obj, target: _crash_half_way(target))
    with pytest.raises(RuntimeError):
        regressors.save({"a": 1}, target)
    return target


def _profile(tmp_path, monkeypatch):
    from paradyse_lab.costmodel.profiles import default_profile, read_profiles, write_profiles

    rows = read_profiles(default_profile("a100-80gb-x8")).head(3)
    target = tmp_path / "p.csv"
    target.write_bytes(b"good")
    monkeypatch.setattr(pd.DataFrame, "to_csv", lambda self, target, **kw: _crash_half_way(target))
    with pytest.raises(RuntimeError):
        write_profiles(rows, target)
    return target


def _settings(tmp_path, monkeypatch):
    calls: list = []
    _fake_steps(monkeypatch, calls)
    target = tmp_path / SETTINGS_FILE
    target.write_bytes(b"good")
    monkeypatch.setattr(Path, "write_text", lambda self, text, *a, **k: _crash_half_way(self))
    try:
        reproduce(tmp_path, quick=True, progress=False, log=lambda m: None)
    except RuntimeError:
        pass
    return target


@pytest.mark.parametrize("writer", [_figure, _joblib, _profile, _settings])
def test_outputs_are_written_atomically(tmp_path, monkeypatch, writer):
    target = writer(tmp_path, monkeypatch)
    assert target.read_bytes() != b"partial"
    assert not [p for p in target.parent.iterdir() if p.name.endswith(".tmp")]


def test_reproduce_runs_on_a_listed_preset_without_a_bundled_profile(tmp_path, monkeypatch):
    """h200-x8 has no bundled profile: the learned cost models get a synthetic one under DIR (the
    costmodel step, and Table 5 through the same `profile_for`). Synthesised here for BERT alone, the cheapest
    of the default models (a quarter of the CPU): which models a synthetic profile holds is
    synthesize_profiles' own (tests/paradyse_lab/costmodel/test_profiles.py), not this path's."""
    from dataclasses import replace

    from paradyse_lab.costmodel import synthetic

    monkeypatch.setattr(synthetic, "DEFAULT_MODELS", ("bert",))
    settings = replace(Settings.make(True, "h200-x8"), costmodels=("analytic", "polynomial"))
    step_costmodel(tmp_path, settings, False)
    accuracy = pd.read_csv(tmp_path / "costmodel_accuracy.csv")
    assert set(accuracy["cost_model"]) == {"analytic", "polynomial"} and set(accuracy["source"]) == {"analytic"}
    assert profile_for(tmp_path, settings) == tmp_path / "profiles" / "analytic_h200-x8.csv"


def _count_runs(monkeypatch) -> list:
    calls: list = []
    real = experiments.run_one
    monkeypatch.setattr(experiments, "run_one", lambda *a, **k: calls.append(a) or real(*a, **k))
    return calls


@pytest.mark.parametrize("edited", ["base of the base", "length file"])
def test_experiment_runs_are_keyed_on_every_file_an_input_names(tmp_path, monkeypatch, edited):
    """The cluster is a TOML whose `base` is another TOML whose base is a preset; the dataset is a length file.
    Editing any file in that chain (or the length file) recomputes the runs; an untouched chain reuses them."""
    base, child, lengths = tmp_path / "base.toml", tmp_path / "child.toml", tmp_path / "lengths.txt"
    base.write_text('base = "a100-80gb-x8"\nmemory_gib = 40\n')
    child.write_text(f'base = "{base}"\npeak_tflops = 300\n')
    lengths.write_text("4096\n8192\n")
    kw = dict(models=("bert",), datasets=(f"file:{lengths}",), exact=False, progress=False)
    setup = experiments.Setup(cluster=str(child), size=2)
    calls = _count_runs(monkeypatch)
    experiments.fig2(setup, tmp_path / "out", **kw)
    ran = len(calls)
    assert ran > 0
    experiments.fig2(setup, tmp_path / "out", **kw)
    assert len(calls) == ran  # nothing changed: every run reused
    if edited == "base of the base":
        base.write_text('base = "a100-80gb-x8"\nmemory_gib = 10\n')
    else:
        lengths.write_text("4096\n16384\n")
    experiments.fig2(setup, tmp_path / "out", **kw)
    assert len(calls) == 2 * ran  # every run recomputed


def test_named_files_follow_the_base_chain_and_file_specs(tmp_path):
    base, child, lengths = tmp_path / "base.toml", tmp_path / "child.toml", tmp_path / "l.csv"
    base.write_text('base = "a100-80gb-x8"\n')
    child.write_text(f'base = "{base}"\n')
    lengths.write_text("seq_len\n5\n")
    settings = {"cluster": str(child), "run": [f"file:{lengths}#seq_len", "bert"], "size": 3, "name": "x"}
    assert result_key.named_files(settings) == [child, base, lengths]


def test_reproduce_steps_are_keyed_on_the_cluster_files_base_chain(tmp_path, monkeypatch):
    base, child = tmp_path / "base.toml", tmp_path / "child.toml"
    base.write_text('base = "a100-80gb-x8"\nmemory_gib = 40\n')
    child.write_text(f'base = "{base}"\n')
    calls: list = []
    _fake_steps(monkeypatch, calls)
    out = tmp_path / "out"
    reproduce(out, quick=True, progress=False, log=lambda m: None, cluster=str(child))
    calls.clear()
    reproduce(out, quick=True, progress=False, log=lambda m: None, cluster=str(child))
    assert {c[0] for c in calls} == {"report"}  # every step reused
    base.write_text('base = "a100-80gb-x8"\nmemory_gib = 10\n')
    calls.clear()
    reproduce(out, quick=True, progress=False, log=lambda m: None, cluster=str(child))
    assert {c[0] for c in calls} == set(STEPS)
