"""What a run says: tokens cut by --max-len or the model's positions (counted, warned once, in the log and the
summary), the end-of-run summary with --no-progress, the planner stated at start, the warning when the cluster
describes another GPU than the one present, and --nproc's default on a CUDA machine."""

import csv
import json

import pytest

from paradyse_lab.cli import main

MICRO = {"model_type": "gpt2", "n_embd": 16, "n_head": 2, "n_layer": 2, "n_positions": 64, "vocab_size": 96}
"""A micro GPT-2 (64 positions): a step takes well under a second."""


@pytest.fixture
def micro(tmp_path):
    path = tmp_path / "micro.json"
    path.write_text(json.dumps(MICRO))
    return path


@pytest.fixture(autouse=True)
def one_thread():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # micro matmuls only lose to thread hand-offs
    yield
    torch.set_num_threads(threads)


def test_cut_tokens_are_counted_warned_once_logged_and_summarised(tmp_path, micro, capsys):
    tokens = tmp_path / "tokens.jsonl"
    tokens.write_text("".join(json.dumps([(3 * j) % 90 + 1 for j in range(n)]) + "\n" for n in (10, 40, 50)))
    log = tmp_path / "log.csv"
    code = main(["train", "--model", str(micro), "--dataset", f"file:{tokens}", "--policy", "static:megatron_ts",
                 "--steps", "3", "--max-len", "32", "--no-progress", "--log-file", str(log), "--long-documents", "cut"])
    out, err = capsys.readouterr()
    assert code == 0
    assert "data: 2 of 3 documents are longer than 32 tokens: cut to 32, 26 of their tokens untrained" in out
    rows = list(csv.DictReader(log.open()))
    assert [int(r["cut_tokens"]) for r in rows] == [0, 8, 18] and [int(r["tokens"]) for r in rows] == [10, 32, 32]
    assert err.count("warning: step 2 leaves 8 tokens") == 1 and "--max-len 32" in err
    assert "run summary: 3 steps, 74 tokens trained, 26 tokens cut" in out  # printed without the progress bar
    assert "peak process RSS (CPU)" in out and {r["peak_of"] for r in rows} == {"process_rss"}
    assert "plans: TS,TS 100%" in out and "planned by the analytic cost model on cluster this CPU host" in out
    assert "planning each step with the analytic cost model for cluster this CPU host (a100-80gb-x8's speeds)" in err


def test_max_len_above_the_positions_is_said(micro, capsys):
    code = main(["train", "--model", str(micro), "--dataset", "uniform:100:120", "--policy", "static:megatron_ts",
                 "--steps", "1", "--max-len", "128", "--no-progress"])
    _, err = capsys.readouterr()
    assert code == 0 and "--max-len 128 is above the model's 64 positions" in err
    assert "documents longer than the model's 64 positions are cut to them" in err


def test_a_cluster_of_another_gpu_is_warned_about(micro, capsys, monkeypatch):
    from paradyse_lab.app import run_summary

    monkeypatch.setattr(run_summary, "present_device", lambda: "NVIDIA H100 80GB HBM3")
    assert main(["train", "--model", str(micro), "--dataset", "uniform:8:16", "--policy", "static:megatron_ts",
                 "--steps", "1", "--no-progress", "--cluster", "a100-80gb-x8"]) == 0
    err = capsys.readouterr().err
    assert "warning: cluster a100-80gb-x8 describes A100-SXM4-80GB, but this machine has NVIDIA H100" in err
    monkeypatch.setattr(run_summary, "present_device", lambda: "NVIDIA A100-SXM4-80GB")
    assert main(["train", "--model", str(micro), "--dataset", "uniform:8:16", "--policy", "static:megatron_ts",
                 "--steps", "1", "--no-progress", "--cluster", "a100-80gb-x8"]) == 0
    assert "describes" not in capsys.readouterr().err


def test_nproc_defaults_to_the_local_gpu_count_on_cuda(monkeypatch, capsys):
    import torch

    from paradyse_lab.cli.train_command import default_nproc

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    assert default_nproc() == 8 and "one process per local GPU, 8" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert default_nproc() is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert default_nproc() is None
