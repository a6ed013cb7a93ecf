"""Planner usability: a model folder as --model, `cost` marking a strategy that cannot split the heads, --gpus on
cost / simulate, and the deprecated GB budget of `train` converted to GiB."""

import json

from paradyse_lab.cli import main

QWEN2_7B = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
            "num_key_value_heads": 4, "num_hidden_layers": 28, "vocab_size": 152064,
            "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1e6, "tie_word_embeddings": False}
"""Qwen2-7B's shapes (its config.json): 28 heads, which 8 GPUs cannot split."""


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def qwen_folder(tmp_path):
    folder = tmp_path / "Qwen2-7B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN2_7B))
    return folder


def test_cost_marks_the_strategies_that_cannot_split_the_heads(capsys, tmp_path):
    code, out, err = run(capsys, "cost", "--model", qwen_folder(tmp_path), "--seq", "4K")
    assert code == 0 and err == ""
    rows = {line.split()[0]: line for line in out.splitlines()[3:] if line and not line.startswith("cannot")}
    assert "yes" in rows["megatron_cz"] and "cannot split" in rows["megatron_ts"] and "cannot split" in rows["metp"]
    assert "cannot split: megatron_ts: heads (28) must be divisible by p (8)" in out
    code, out, _ = run(capsys, "cost", "--model", tmp_path / "Qwen2-7B",
                       "--seq", "4K", "--format", "json")
    d = json.loads(out)
    assert list(d["strategies"]) == ["megatron_cz"] and set(d["cannot_split"]) == {"megatron_ts", "ulysses_z", "metp"}


def test_cost_marks_a_length_some_strategies_cannot_lay_out(capsys):
    code, out, _ = run(capsys, "cost", "--model", "gpt", "--seq", "1000")  # not a multiple of 2p = 16
    assert code == 0 and "cannot split: metp: sequence length 1000 must be divisible by 16" in out
    code, out, err = run(capsys, "cost", "--model", "gpt", "--seq", "1000", "--strategies", "metp")
    assert code == 2 and out == "" and err.count("\n") == 1 and "no strategy can split" in err


def test_gpus_changes_the_cluster_count_on_cost_and_simulate(capsys, tmp_path):
    code, out, _ = run(capsys, "cost", "--model", qwen_folder(tmp_path), "--seq", "4K", "--gpus", "4",
                       "--format", "json")
    d = json.loads(out)
    assert code == 0 and d["gpus"] == 4 and d["cannot_split"] == {}  # 28 heads split over 4 GPUs
    times = {}
    for gpus in (None, 16):
        extra = ["--gpus", gpus] if gpus else []
        code, out, _ = run(capsys, "simulate", "--model", "gpt", "--dataset", "uniform:32768:65536", "--size", "2",
                           "--policy", "static:megatron_cz", "--format", "json", *extra)
        assert code == 0
        times[gpus] = json.loads(out)["total_time_s"]
    # 16 GPUs of an 8-GPU preset are two nodes joined by InfiniBand: another cluster, another time
    assert 0 < times[16] != times[None] > 0


def test_train_budget_gb_is_deprecated_and_read_in_gb(capsys):
    from paradyse_lab.cli import build_parser
    from paradyse_lab.cli.train_command import options_from_args

    args = build_parser().parse_args(["train", "--model", "gpt2-tiny", "--dataset", "uniform:8:16",
                                      "--budget-gb", "2"])
    opts = options_from_args(args)
    assert abs(opts.budget_gib * 2**30 - 2e9) < 1 and "--budget-gb is deprecated" in capsys.readouterr().err
    args = build_parser().parse_args(["train", "--model", "gpt2-tiny", "--dataset", "uniform:8:16",
                                      "--budget-gib", "2", "--gpus", "3"])
    opts = options_from_args(args)
    assert opts.budget_gib == 2 and args.nproc == 3
