"""What is reported is what happened: a resumed run names its checkpoint; the summary's mean step leaves the
warm-up step out and says so; `calibrate` states this run's wall time and warns about a poor fit; a one-process
CPU run computes with the cores the machine has free."""

import os

from micro_gpt import one_thread, write_micro  # noqa: F401 - one_thread: an autouse fixture

from paradyse_lab.app.run_summary import summary_lines
from paradyse_lab.app.train_options import TrainOptions
from paradyse_lab.cli import main
from paradyse_lab.cluster.files import get_cluster


def _row(step_s: float) -> dict:
    return {"tokens": 10, "cut_tokens": 0, "step_s": step_s, "peak_bytes": 2**20, "peak_of": "process_rss",
            "plan": "TS"}


def test_the_mean_step_leaves_the_warm_up_out():
    opts = TrainOptions(model="gpt2-tiny", dataset="x")
    cluster = get_cluster("a100-80gb-x8")
    lines = summary_lines([_row(5.0), _row(1.0), _row(2.0)], opts, cluster)
    assert "mean step 1.500 s over the 2 after the first (the first, 5.000 s, is warm-up and left out)" in lines[1]
    assert "one step 5.000 s (warm-up included)" in summary_lines([_row(5.0)], opts, cluster)[1]


def test_calibrate_states_its_wall_time_and_warns_about_a_poor_fit(capsys):
    from paradyse_lab.cli.calibrate_command import POOR_FIT, poor_fits, print_summary

    s = {"device": "cpu", "ranks": 2, "peak_tflops": 0.1, "elementwise_gbps": 5.0, "memory_gib": 8.0,
         "collectives": {"all_reduce": {"alpha_us": 50.0, "busbw_gbps": 1.0, "fit_mape": 0.44, "sizes": 6},
                         "all_gather": {"alpha_us": 40.0, "busbw_gbps": 1.0, "fit_mape": 0.05, "sizes": 6}},
         "gemm_efficiency": [], "attention_efficiency_causal": [], "profile_rows": 4, "profile_lengths": [64],
         "skipped": [], "wall_s": 900.0, "run_wall_s": 12.4, "cluster": "c.toml", "profile": "p.csv"}
    s["poor_fits"] = poor_fits(s)
    print_summary(s)
    out, err = capsys.readouterr()
    assert "in 12 s of wall time (measured in 900 s in all" in out
    assert f"warning: the all_reduce fit is poor: its error is 44.0%, above {POOR_FIT:.0%}" in err
    assert "all_gather fit is poor" not in err


def test_a_resumed_run_names_its_checkpoint(tmp_path, capsys):
    argv = ["train", "--model", write_micro(tmp_path), "--dataset", "uniform:16:16", "--policy", "static:megatron_ts",
            "--no-progress", "--checkpoint-dir", str(tmp_path / "ck")]
    assert main(argv + ["--steps", "2"]) == 0
    assert "weights: random" in capsys.readouterr().out
    assert main(argv + ["--steps", "3", "--resume"]) == 0
    out = capsys.readouterr().out
    assert f"weights: resumed from checkpoint {tmp_path / 'ck' / 'step-000002'}" in out


def test_one_cpu_process_uses_the_free_cores(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    monkeypatch.setattr(os, "getloadavg", lambda: (1.6, 1.0, 1.0))  # one of two cores busy elsewhere
    torch.set_num_threads(2)
    assert main(["train", "--model", write_micro(tmp_path), "--dataset", "uniform:16:16", "--policy",
                 "static:megatron_ts", "--steps", "1", "--no-progress", "--nproc", "1"]) == 0
    assert torch.get_num_threads() == 1
    assert "CPU threads per rank: 1 (the cores free of load" in capsys.readouterr().out


def test_the_summary_names_the_model_that_planned():
    """`auto` is named for what it stands for on the cluster; `--groups` plans with the analytic model, so a run
    with groups on a cluster with kernel tables (the H100 preset: auto would be replay) says analytic."""
    import paradyse_lab.app  # noqa: F401 - installs the tracer that `auto` needs for replay

    h100 = get_cluster("h100-80gb-x8")
    plain = TrainOptions(model="gpt2-tiny", dataset="x")
    grouped = TrainOptions(model="gpt2-tiny", dataset="x", global_batch=4, groups="sized")
    assert "planned by the replay cost model on cluster h100-80gb-x8 (--cost-model auto)" in \
        summary_lines([_row(1.0)], plain, h100)[-1]
    assert "planned by the analytic cost model on cluster h100-80gb-x8 (--groups plans with the analytic" in \
        summary_lines([_row(1.0)], grouped, h100)[-1]
