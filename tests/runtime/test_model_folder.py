"""A model folder means one thing to `train --model DIR` and `build_model(DIR)`: weights there are loaded (as
--init-from loads them), a folder with only a config.json starts from random weights; every run says which."""

from __future__ import annotations

import csv
import importlib.util
import shutil

import pytest
import torch
from hf_folders import build, save
from torch.testing import assert_close

import paradyse_lab as pl
from paradyse_lab.cli import main

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save(build("gpt2"), tmp_path_factory.mktemp("hf") / "gpt2", sharded=False)


def _first_loss(tmp_path, capsys, name: str, *model_args) -> tuple[float, str]:
    log = tmp_path / f"{name}.csv"
    assert main(["train", *model_args, "--dataset", "uniform:16:16", "--steps", "1", "--max-len", "16",
                 "--policy", "static:megatron_ts", "--no-progress", "--log-file", str(log)]) == 0
    out = capsys.readouterr().out
    return float(next(csv.DictReader(log.open()))["loss"]), out


def test_train_model_folder_loads_its_weights(folder, tmp_path, capsys):
    loaded, out = _first_loss(tmp_path, capsys, "model", "--model", str(folder))
    assert f"weights: loaded from {folder}" in out
    init_from, _ = _first_loss(tmp_path, capsys, "init", "--init-from", str(folder))
    random, out = _first_loss(tmp_path, capsys, "config", "--model", str(folder / "config.json"))
    assert "weights: random (initialised from --seed 0" in out
    assert loaded == init_from and loaded != random


def test_build_model_reads_a_folder_as_train_does(folder, tmp_path):
    loaded = pl.build_model(folder)
    want = dict(pl.build_model(folder / "config.json", seed=0).named_parameters())
    config_only = tmp_path / "config-only"
    config_only.mkdir()
    shutil.copy(folder / "config.json", config_only / "config.json")
    random = pl.build_model(config_only, seed=0)  # no weights: random from --seed, as `train --model` starts
    for name, param in random.named_parameters():
        assert_close(param, want[name])
    assert any(not torch.equal(p, want[n]) for n, p in loaded.named_parameters())
