"""`paradyse-lab plan`'s head options and `plan --max-length`: the planner takes the fastest plan that fits over
the whole head, the tiled loss and the vocabulary-parallel head (paradyse_lab/costmodel/head_loss.py), so a short
sequence pays nothing for the tiling; the longest length fits and one layout unit more does not."""

import json

from paradyse_lab.cli import main

HEADS = ("auto", "whole", "tiled", "vocab")
COMMON = ["--model", "llama3-8b", "--cluster", "h100-80gb-x8", "--recompute", "--format", "json",
          "--cost-model", "analytic"]  # the head options under one model, without tracing llama3-8b


def plan(capsys, *argv, code: int = 0) -> dict:
    """`plan`'s JSON; its exit status must be `code` (1: no plan fits, the least-memory plan printed)."""
    assert main(["plan", *COMMON, *argv]) == code
    return json.loads(capsys.readouterr().out)


def test_short_sequences_pay_nothing_for_the_tiled_loss(capsys):
    auto, whole, tiled, vocab = (plan(capsys, "--seq", "16K", "--head", h) for h in HEADS)
    assert whole["predicted_time_s"] < tiled["predicted_time_s"]  # among the replicated heads: no tiling at 16K
    assert auto["head"] == "vocab" and auto["plan"] == vocab["plan"]  # the sharded head is faster still (no
    assert auto["predicted_time_s"] == vocab["predicted_time_s"] < whole["predicted_time_s"]  # [V, h] all-reduce)


def test_the_longest_length_fits_and_one_unit_more_does_not(capsys):
    whole, tiled = (plan(capsys, "--max-length", "--head", h) for h in ("whole", "tiled"))
    auto = plan(capsys, "--max-length")
    assert set(auto) >= {"max_length", "step_time_s", "memory", "head", "plan"}
    assert tiled["max_length"] > 1.5 * whole["max_length"]
    assert auto["head"] == "vocab" and auto["max_length"] > 1.2 * tiled["max_length"]  # states / 8 (15.7 GiB)
    assert auto["memory"]["peak"] <= auto["memory"]["budget"]
    for got in (whole, auto):
        at = plan(capsys, "--seq", str(got["max_length"]), "--head", got["head"])
        beyond = plan(capsys, "--seq", str(got["max_length"] + 16), "--head", got["head"], code=1)  # 2p = 16
        assert at["status"] != "infeasible" and at["predicted_time_s"] == got["step_time_s"]
        assert beyond["status"] == "infeasible"


def test_cost_shows_the_head_options_beside_the_strategies(capsys):
    assert main(["cost", "--model", "llama3-8b", "--cluster", "h100-80gb-x8", "--seq", "256K", "--format",
                 "json"]) == 0
    heads = json.loads(capsys.readouterr().out)["head"]
    assert set(heads) == {"whole", "tiled", "vocab"}
    assert heads["tiled"]["kept_bytes"] < heads["whole"]["kept_bytes"] / 15  # the whole head keeps e t V + 4 t
    assert heads["tiled"]["time_s"] > heads["whole"]["time_s"]
    assert main(["cost", "--model", "gpt", "--seq", "64K"]) == 0 and "head option" not in capsys.readouterr().out


def test_one_gpu_has_no_vocabulary_parallel_head(capsys):
    # at one GPU the one shard is the whole table: --head vocab is refused, auto never picks it
    assert main(["plan", "--model", "gpt2-tiny", "--gpus", "1", "--seq", "1024", "--head", "vocab"]) == 2
    err = capsys.readouterr().err
    assert "--head vocab" in err and "--gpus 2" in err and len(err.strip().splitlines()) == 1
    assert main(["plan", "--model", "gpt2-tiny", "--gpus", "1", "--max-length", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["head"] != "vocab"
    from paradyse_lab.cluster.files import get_cluster
    from paradyse_lab.core.model_spec import get_model
    from paradyse_lab.costmodel import AnalyticCostModel
    from paradyse_lab.costmodel.head_loss import head_cost_models

    one = AnalyticCostModel(get_model("gpt2-tiny"), get_cluster("a100-80gb-x8"), 1)
    assert set(head_cost_models(one)) == {"whole", "tiled"}  # simulate at one GPU plans as a one-process train
