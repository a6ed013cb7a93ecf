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


def test_smallest_fit_and_json(capsys):
    assert main(ARGS + ["--policy", "static:megatron_cz", "--groups", "smallest-fit", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["summary"]["groups"] == "smallest-fit" and len(d["steps"]) == 2
    assert d["summary"]["tokens_per_s"] <= d["summary"]["bound_tokens_per_s"] + 1e-9


def test_rounds_and_megatron_print_each_rounds_groups(capsys):
    """`--groups rounds` and `--groups megatron`: every step's rounds split by ' / ', each round all 4 GPUs;
    Megatron's per-rank length (chosen on the next seed's batches) in the summary; ours never slower."""
    argv = ARGS[:-1] + ["4", "--size", "8", "--format", "json"]
    summaries = {}
    for groups, policy in (("rounds", "dynamic:dp"), ("megatron", "static:megatron_cz")):
        assert main(argv + ["--policy", policy, "--groups", groups]) == 0
        d = json.loads(capsys.readouterr().out)
        summaries[groups] = d["summary"]
        for step in d["steps"]:
            rounds = step["group_sizes"].split(" / ")
            assert len(rounds) == step["rounds"] and all(sum(map(int, r.split(","))) == 4 for r in rounds)
    assert summaries["megatron"]["megatron_per_rank"] >= 512
    assert summaries["rounds"]["time_s"] <= summaries["megatron"]["time_s"] + 1e-9


def test_runnable_groups_is_every_size_now(tmp_path, capsys):
    # gpt2-tiny has 12 heads: on 8 GPUs a group of 2 or 4 gathers contiguous shards from the whole world
    sizes = {}
    for extra in ([], ["--runnable-groups"]):
        argv = ["simulate", "--model", "gpt2-tiny", "--dataset", "uniform:256:4096", "--size", "6", "--gpus", "8",
                "--global-batch", "3", "--policy", "dynamic:dp", *extra, "--out", str(tmp_path / "s.csv")]
        assert main(argv) == 0
        sizes[bool(extra)] = list(pd.read_csv(tmp_path / "s.csv")["group_sizes"].astype(str))
    assert sizes[True] == sizes[False]


def test_global_batch_of_packs(tmp_path):
    # 12 documents packed into steps of at most 8192 tokens, two packs per global batch: each pack is one group's
    from paradyse_lab.workload.lengths import get_workload

    docs = get_workload("uniform:256:4096", 12, 0, pack_tokens=8192)
    argv = ["simulate", "--model", "gpt2-tiny", "--dataset", "uniform:256:4096", "--size", "12", "--gpus", "4",
            "--policy", "dynamic:dp", "--pack-tokens", "8192", "--out", str(tmp_path / "s.csv")]
    assert main(argv + ["--global-batch", "2"]) == 0
    rows = pd.read_csv(tmp_path / "s.csv")
    assert rows["items"].sum() == len(docs.packs) < 12 and rows["tokens"].sum() == sum(docs.lengths)
    assert rows["longest"].max() == max(docs.lengths)
    assert main(argv + ["--global-batch-tokens", "16384"]) == 0
    by_tokens = pd.read_csv(tmp_path / "s.csv")
    assert by_tokens["tokens"].sum() == sum(docs.lengths)
    assert all(t <= 16384 or n == 1 for t, n in zip(by_tokens["tokens"], by_tokens["items"]))


def test_train_groups_refusals(capsys):
    base = ["train", "--model", "gpt2-tiny", "--dataset", "uniform:16:48", "--steps", "1"]
    cases = [([], "--groups applies to --global-batch"),
             (["--global-batch", "4", "--group-size", "2"], "not both"),
             (["--global-batch", "4", "--batch", "2"], "--batch must be 1"),
             (["--global-batch", "4", "--nproc", "3"], "power of two"),
             (["--global-batch", "4", "--groups", "smallest-fit"], "--policy must be static:NAME"),
             (["--global-batch", "4", "--cost-model", "calibrated"], "--groups plans with the analytic cost model")]
    for extra, message in cases:
        groups = [] if "--groups" in extra else ["--groups", "sized"]
        assert main(base + groups + extra) == 2, extra
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, (extra, err)
