"""`simulate --global-batch`: the group sizes of every step, as a table and as JSON, and the step CSV."""

import json

import pandas as pd

from paradyse_lab.cli import main

ARGS = ["simulate", "--model", "gpt2-tiny", "--dataset", "uniform:256:4096", "--size", "4", "--gpus", "4",
        "--global-batch", "2"]


def test_simulate_prints_the_group_sizes_of_every_step(capsys, tmp_path):
    assert main(ARGS + ["--policy", "dynamic:dp", "--out", str(tmp_path / "steps.csv")]) == 0
    out = capsys.readouterr().out
    rows = pd.read_csv(tmp_path / "steps.csv")
    assert len(rows) == 2 and (rows["trained"] == 2).all()
    for sizes in rows["group_sizes"].astype(str):
        assert sum(int(s) for s in sizes.split(",")) == 4 and f"  {sizes}  " in out


def test_dynamic_cp_and_json(capsys):
    assert main(ARGS + ["--policy", "static:megatron_cz", "--groups", "dynamic-cp", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["summary"]["groups"] == "dynamic-cp" and len(d["steps"]) == 2
    assert d["summary"]["tokens_per_s"] <= d["summary"]["bound_tokens_per_s"] + 1e-9


def test_runnable_groups_is_every_size_now(tmp_path, capsys):
    # gpt2-tiny has 12 heads: on 8 GPUs a group of 2 or 4 gathers contiguous shards from the whole world
    sizes = {}
    for extra in ([], ["--runnable-groups"]):
        argv = ["simulate", "--model", "gpt2-tiny", "--dataset", "uniform:256:4096", "--size", "6", "--gpus", "8",
                "--global-batch", "3", "--policy", "dynamic:dp", *extra, "--out", str(tmp_path / "s.csv")]
        assert main(argv) == 0
        sizes[bool(extra)] = list(pd.read_csv(tmp_path / "s.csv")["group_sizes"].astype(str))
    assert sizes[True] == sizes[False]
