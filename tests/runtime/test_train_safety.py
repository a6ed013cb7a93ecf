"""paradyse_lab.runtime.training.loop never loses or corrupts a run silently: each step trains its own documents,
resume takes
the newest checkpoint that verifies, a non-finite loss stops the run, the log is written per step, changed
settings are refused on resume, and `--nproc` ranks report errors once and stop with their launcher."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from paradyse_lab.app.train_options import TrainOptions
from paradyse_lab.app.training import train
from paradyse_lab.errors import RunStopped, UserInputError
from paradyse_lab.runtime.model.parallel_gpt import ParallelGPT

ROOT = Path(__file__).resolve().parents[2]
MICRO_GPT2 = {"model_type": "gpt2", "n_embd": 16, "n_head": 2, "n_layer": 2, "n_positions": 512, "vocab_size": 96}
"""A GPT-2 config small enough that a CPU step takes milliseconds."""
BASE = dict(dataset="uniform:8:16", policy="static:megatron_ts", max_len=16, progress=False)


@pytest.fixture(autouse=True, scope="module")
def micro_model(tmp_path_factory):
    """BASE trains a micro GPT-2 on one intra-op thread (tiny matmuls only lose to thread hand-offs); one config
    file for the module, so that a checkpoint of one test (`trained`) is another's to resume."""
    path = tmp_path_factory.mktemp("micro-model") / "micro-gpt2.json"
    path.write_text(json.dumps(MICRO_GPT2))
    BASE["model"] = str(path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def seen(monkeypatch):
    """Every (ids, labels) the model is called with; `seen.fail_at` makes call N return a NaN loss or raise."""
    calls = []
    original = ParallelGPT.forward

    def spy(self, ids, plan, labels=None, cu_seqlens=None, **kwargs):
        calls.append((ids.clone(), labels.clone()))
        logits, loss = original(self, ids, plan, labels, cu_seqlens=cu_seqlens, **kwargs)  # loss_tile, ...
        if len(calls) == getattr(spy, "nan_at", 0):
            loss = loss * float("nan")
        if len(calls) == getattr(spy, "crash_at", 0):
            raise KeyboardInterrupt
        return logits, loss

    monkeypatch.setattr(ParallelGPT, "forward", spy)
    spy.calls = calls
    return spy


def test_jsonl_steps_train_exactly_their_own_documents(tmp_path, seen):
    docs = [[(7 * i + j) % 90 + 1 for j in range(n)] for i, n in enumerate((300, 40, 120))]
    path = tmp_path / "tokens.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    train(TrainOptions(**{**BASE, "dataset": f"file:{path}", "max_len": 0, "steps": 3}))
    trained = []
    for ids, labels in seen.calls:
        real = int((labels[0] != -100).sum()) + 1  # labelled positions + the last token
        assert torch.equal(labels[0, : real - 1], ids[0, 1:real])  # next-token targets of real tokens only
        assert (labels[0, real - 1:] == -100).all()
        trained.append(ids[0, :real].tolist())
    assert trained == docs  # every token of every document, in the file's order (the default --data-order)
    seen.calls.clear()
    train(TrainOptions(**{**BASE, "dataset": f"file:{path}", "max_len": 0, "steps": 3, "data_order": "sorted"}))
    assert [ids[0, :int((labels[0] != -100).sum()) + 1].tolist() for ids, labels in seen.calls] == sorted(docs, key=len)


def test_packed_jsonl_steps_train_their_documents_concatenated(tmp_path, seen):
    """--pack-tokens with a token file: a step's ids are its documents (cut to --max-len) end to end in the
    packer's order (one rank: no padding); no label crosses a document boundary or lies on padding."""
    from paradyse_lab.workload.packing import pack_document_indices

    docs = [[(5 * i + j) % 90 + 1 for j in range(n)] for i, n in enumerate((30, 7, 1, 50, 12, 19))]
    path = tmp_path / "tokens.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    train(TrainOptions(**{**BASE, "dataset": f"file:{path}", "max_len": 40, "pack_tokens": 48, "steps": 3,
                                 "long_documents": "cut"}))
    ordered = [d[:40] for d in docs]  # the token file's documents in its order
    steps = pack_document_indices([len(d) for d in ordered], 48)
    assert len(seen.calls) == len(steps) == 3
    for (ids, labels), step in zip(seen.calls, steps):
        want_ids, want_labels = [], []
        for i in step:
            want_ids += ordered[i]
            want_labels += ordered[i][1:] + [-100]
        assert ids.tolist() == [want_ids]
        assert labels.tolist() == [want_labels]
    assert sorted(i for step in steps for i in step) == list(range(len(docs)))


def test_packed_steps_are_planned_as_packs_of_documents(tmp_path):
    """--pack-tokens: the policy plans each step as its pack's documents (a PackedStep: attention per document),
    not as one sequence of the padded pack's length (one rank: layout unit 1)."""
    from unittest import mock

    from paradyse_lab.core.plan import Plan
    from paradyse_lab.costmodel.packed import PackedStep
    from paradyse_lab.simulator.policies import StepDecision
    from paradyse_lab.workload.packing import pack_document_indices

    lengths = (5, 9, 3, 14, 1, 7)
    path = tmp_path / "lengths.txt"
    path.write_text("\n".join(map(str, lengths)))
    asked = []

    def decide(step, batch):
        asked.append(step)
        return StepDecision(Plan.from_names(("megatron_ts",) * 2), 0.0, True, 0.0)

    with mock.patch("paradyse_lab.simulator.planner.build_policy", return_value=mock.Mock(decide=decide)):
        train(TrainOptions(**{**BASE, "dataset": f"file:{path}", "pack_tokens": 16, "steps": 3}))
    ordered = sorted(lengths)  # a file's lengths in the workload's order
    want = [PackedStep(tuple(ordered[i] for i in step), 1) for step in pack_document_indices(ordered, 16)]
    assert asked == want and all(len(s.documents) > 1 for s in want)


def test_a_packed_length_file_trains_its_own_steps(tmp_path):
    """A length file of packed steps (several lengths per line) trains those steps, in its order, as simulate
    does, instead of flattening and training one document per step."""
    from unittest import mock

    from paradyse_lab.core.plan import Plan
    from paradyse_lab.costmodel.packed import PackedStep
    from paradyse_lab.simulator.policies import StepDecision

    path = tmp_path / "packed.txt"
    path.write_text("5 9 1\n14\n7 3\n")
    asked = []

    def decide(step, batch):
        asked.append(step)
        return StepDecision(Plan.from_names(("megatron_ts",) * 2), 0.0, True, 0.0)

    with mock.patch("paradyse_lab.simulator.planner.build_policy", return_value=mock.Mock(decide=decide)):
        log = train(TrainOptions(**{**BASE, "dataset": f"file:{path}", "steps": 4}))
    assert asked == [PackedStep(d, 1) for d in ((5, 9, 1), (14,), (7, 3), (5, 9, 1))]
    assert [r["docs"] for r in log] == [3, 1, 2, 3] and [r["seq_len"] for r in log] == [15, 14, 10, 15]
    with pytest.raises(UserInputError, match="--batch must be 1"):
        train(TrainOptions(**{**BASE, "dataset": f"file:{path}", "steps": 1, "batch": 2}))


def _held_out_packs(monkeypatch) -> list[tuple[int, ...]]:
    """Per held-out step an evaluation runs, the documents (indices) of its pack."""
    from paradyse_lab.runtime.training.step_inputs import StepInputs

    real, evaluated = StepInputs.batch, []

    def spy(self, step, vocab):
        if self.seed_offset:  # the held-out data (StepInputs.held_out)
            evaluated.append(self.packs.steps[step % len(self.packs.steps)])
        return real(self, step, vocab)

    monkeypatch.setattr(StepInputs, "batch", spy)
    return evaluated


def test_packed_evaluation_runs_as_many_different_packs_as_asked(monkeypatch, capsys):
    """--pack-tokens with a sampled held-out workload: every evaluation runs --eval-batches different packs, the
    same ones each time (it sampled --eval-batches documents, packed them into fewer, and ran those again)."""
    evaluated = _held_out_packs(monkeypatch)
    log = train(TrainOptions(**{**BASE, "pack_tokens": 32, "steps": 2, "eval_dataset": "uniform:8:16",
                                "eval_every": 1, "eval_batches": 4}))
    assert len(evaluated) == 2 * 4 and evaluated[:4] == evaluated[4:] and len(set(evaluated[:4])) == 4, evaluated
    assert [r["eval_steps"] for r in log] == [4, 4] and "each over 4 held-out steps\n" in capsys.readouterr().out


def test_a_held_out_file_with_fewer_packs_than_asked_runs_each_once_and_says_so(tmp_path, monkeypatch, capsys):
    """A held-out length file whose documents make 2 packs, with --eval-batches 4: an evaluation runs the 2 packs
    once each (not 4 steps repeating them), and the start warning and the end summary say 2 of the 4 asked."""
    held_out = tmp_path / "eval.txt"
    held_out.write_text("10\n12\n14\n6\n")  # first-fit decreasing into 32 tokens: (14, 12, 6), (10)
    evaluated = _held_out_packs(monkeypatch)
    log = train(TrainOptions(**{**BASE, "pack_tokens": 32, "steps": 2, "eval_dataset": f"file:{held_out}",
                                "eval_every": 2, "eval_batches": 4}))
    assert len(evaluated) == 2 and sorted(i for pack in evaluated for i in pack) == [0, 1, 2, 3]  # each doc once
    assert [r.get("eval_steps") for r in log] == [None, 2]
    out, err = capsys.readouterr()
    assert err.count("has 2 different held-out packs of --pack-tokens 32, fewer than --eval-batches 4") == 1
    assert "each over 2 held-out steps, of the 4 --eval-batches asked" in out


def _data_file(checkpoint):
    """The checkpoint's (one rank's) tensor data file, torch.distributed.checkpoint's `__0_0.distcp`."""
    (found,) = checkpoint.glob("*.distcp")
    return found


def _run(tmp_path, **kw):
    return train(TrainOptions(**{**BASE, "checkpoint_dir": str(tmp_path / "ck"), "checkpoint_every": 2, **kw}))


@pytest.fixture(scope="module")
def trained(tmp_path_factory, micro_model):
    """`_run`'s checkpoint folder after steps=2 and after steps=4 (checkpoints at 2 and 4), each trained once for
    the module: `_copy_run(trained, steps, tmp_path)` gives a test its own copy, as if it had run `_run` itself."""
    folders = {}
    for steps in (2, 4):
        root = tmp_path_factory.mktemp(f"trained-{steps}")
        _run(root, steps=steps)
        folders[steps] = root / "ck"
    return folders


def _copy_run(trained, steps: int, tmp_path) -> None:
    """`_run(tmp_path, steps=steps)`'s checkpoints, copied from the module's `trained` run."""
    shutil.copytree(trained[steps], tmp_path / "ck")


@pytest.mark.parametrize("damage", ["latest missing", "latest empty", "meta missing", "shard truncated",
                                    "shard bytes flipped"])
def test_resume_takes_the_newest_checkpoint_that_verifies(tmp_path, damage, trained):
    _copy_run(trained, 4, tmp_path)
    ck = tmp_path / "ck"
    newest = ck / "step-000004"
    shard = _data_file(newest)
    if damage == "latest missing":
        (ck / "latest").unlink()
    elif damage == "latest empty":
        (ck / "latest").write_text("")
    elif damage == "meta missing":
        (newest / "meta.json").unlink()
    elif damage == "shard truncated":
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    else:
        data = bytearray(shard.read_bytes())
        for i in range(len(data) // 2, len(data) // 2 + 64):
            data[i] ^= 0xFF
        shard.write_bytes(bytes(data))
    intact = _data_file(ck / "step-000002").read_bytes()
    log = _run(tmp_path, steps=6, resume=True)
    expected_first = 5 if damage.startswith("latest") else 3
    assert log[0]["step"] == expected_first and all(r["loss"] == r["loss"] for r in log)
    assert _data_file(ck / "step-000002").read_bytes() == intact


def test_no_verifying_checkpoint_or_a_new_run_over_checkpoints_is_refused(tmp_path, trained):
    _copy_run(trained, 2, tmp_path)
    with pytest.raises(UserInputError, match="holds checkpoints"):
        _run(tmp_path, steps=2)
    _data_file(tmp_path / "ck" / "step-000002").write_bytes(b"garbage")
    with pytest.raises(UserInputError, match="no checkpoint under .* verifies"):
        _run(tmp_path, steps=4, resume=True)


@pytest.mark.parametrize("change", [{"lr": 0.01}, {"dataset": "uniform:8:32"}, {"seed": 3}])
def test_resume_refuses_changed_settings(tmp_path, change, trained):
    _copy_run(trained, 2, tmp_path)
    field = next(iter(change))
    with pytest.raises(UserInputError, match=f"has {field}="):
        _run(tmp_path, steps=4, resume=True, **change)


def test_a_non_finite_loss_stops_without_advancing_latest(tmp_path, seen):
    seen.nan_at = 3
    with pytest.raises(RunStopped, match="loss is nan at step 3"):
        _run(tmp_path, steps=6)
    assert (tmp_path / "ck" / "latest").read_text() == "step-000002"
    assert not (tmp_path / "ck" / "step-000004").exists()


def test_the_log_file_gets_each_step_as_it_ends(tmp_path, seen):
    seen.crash_at = 3
    log_file = tmp_path / "log.csv"
    with pytest.raises(KeyboardInterrupt):
        train(TrainOptions(**BASE, steps=5, log_file=str(log_file)))
    rows = log_file.read_text().splitlines()
    assert rows[0].startswith("step,") and [r.split(",")[0] for r in rows[1:]] == ["1", "2"]
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UserInputError, match="--log-file"):
        train(TrainOptions(**BASE, steps=5, log_file=str(tmp_path / "afile" / "log.csv")))
    assert len(seen.calls) == 3  # refused before the first step


@pytest.mark.xdist_group("gloo-worlds")
def test_an_error_in_every_rank_prints_one_line_once(monkeypatch, capfd):
    """Both ranks refuse their input: one line, exit 2. (On the distributed tests' worker, as
    `test_a_killed_rank_is_named_not_its_peers_echo`: its ranks fork from that worker's fork server instead of a
    server of their own, ~0.6 CPU s less.)"""
    import launcher_cases

    import paradyse_lab.cli.train_command as rt

    monkeypatch.setattr(rt, "_init_and_train", launcher_cases.failing_rank)
    monkeypatch.setattr(rt, "RANK_PRELOAD", ())  # what the real rank imports, this one never needs
    code = rt.main(["--nproc", "2", "--model", "gpt2-tiny", "--dataset", "uniform:8:16", "--steps", "1"])
    err = capfd.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "written by 1 ranks; this run has 2" in err[0], err


def test_the_launchers_checks_build_no_solver_the_first_plan_builds_it(monkeypatch):
    """`train --nproc N`'s launcher builds what the ranks build from names (paradyse_lab/app/training.py
    `preflight`) and never plans: it built the default `dynamic:dp` policy's solver, which imports numba and loads
    the compiled kernels (1-2 CPU s before any rank started). A policy builds its solver at its first solve (here
    the heuristic's: cheap) and still refuses an unknown solver name when it is built."""
    from dataclasses import replace

    import paradyse_lab.simulator.policies
    from paradyse_lab.app.training import plan_policy, preflight
    from paradyse_lab.core.model_spec import get_model
    from paradyse_lab.simulator.policies import DynamicPolicy

    built, get_solver = [], paradyse_lab.simulator.policies.get_solver
    monkeypatch.setattr(paradyse_lab.simulator.policies, "get_solver",  # the name the policies build solvers with
                        lambda name, **kw: built.append(name) or get_solver(name, **kw))
    opts = TrainOptions(model="gpt2-tiny", dataset="uniform:8:16", steps=1)
    assert opts.policy == "dynamic:dp"
    preflight(opts, 2)
    policy = plan_policy(replace(opts, policy="dynamic:heuristic"), get_model("gpt2-tiny"), 2, quiet=True)
    assert built == []
    assert policy.decide(16, 1).feasible and built == ["heuristic"]
    with pytest.raises(UserInputError, match="unknown solver 'dpp'"):
        DynamicPolicy("dpp", policy.cost_model, policy.graph, policy.budget_bytes)
    with pytest.raises(UserInputError):  # a static solver with no strategy, refused when built as before
        DynamicPolicy("static:", policy.cost_model, policy.graph, policy.budget_bytes)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ranks_stop_when_their_launcher_is_killed(tmp_path, sig=signal.SIGKILL):
    """The launcher of `train --nproc 2` (runtime/launch/local.py `launch`, what paradyse_lab/cli/train_command.py
    calls) killed while its two ranks train on, one of them stopped (SIGSTOP): the ranks end too. The launcher
    process runs `launch` alone (the command's option checks before it would only add torch and the planner to its
    start-up; that `train --nproc` goes through `launch` is test_an_error_in_every_rank_prints_one_line_once's)."""
    script = ("import launcher_cases; from paradyse_lab.runtime.launch.local import launch; "
              "launch(launcher_cases.sleepy_rank, 2)")
    env = {**os.environ, "PARADYSE_TEST_PIDS": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "runtime")])}
    launcher = subprocess.Popen([sys.executable, "-c", script], env=env)
    pids = []
    try:
        deadline = time.monotonic() + 60
        while len(pids) < 2 and time.monotonic() < deadline and launcher.poll() is None:
            time.sleep(0.1)
            pids = [int(p.read_text()) for p in tmp_path.glob("rank-*.pid")]
        assert len(pids) == 2, "the ranks did not start"
        os.kill(max(pids), signal.SIGSTOP)  # a stopped rank ends too (it could not run a watchdog of its own)
        launcher.send_signal(sig)
        launcher.wait(10)
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in pids if _alive(p)], "orphaned ranks kept running"
    finally:
        launcher.kill()
        for p in pids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def test_diverged_weights_are_never_checkpointed(tmp_path, monkeypatch):
    import torch

    real_step, calls = torch.optim.AdamW.step, []

    def step(self, *a, **kw):  # the third optimizer step overflows one weight, as a too large --lr does
        out = real_step(self, *a, **kw)
        calls.append(1)
        if len(calls) == 3:
            with torch.no_grad():
                self.param_groups[0]["params"][0].fill_(float("inf"))
        return out

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    with pytest.raises(RunStopped, match="weights are not finite after the optimizer step of step 3"):
        _run(tmp_path, steps=6, checkpoint_every=1)
    ck = tmp_path / "ck"
    assert (ck / "latest").read_text().strip() == "step-000002" and not (ck / "step-000003").exists()
    from paradyse_lab.runtime.checkpoints.dcp import read_full

    weights, _ = read_full(ck / "step-000002")
    assert all(torch.isfinite(v).all() for v in weights.values())


def test_the_launcher_reports_the_rank_that_failed_not_its_peers_echo(capfd):
    """Rank 1 refuses its input; rank 0's error on the connection rank 1 closed is an echo: the launcher raises
    rank 1's one line, and rank 0's traceback is not shown."""
    import socket

    import launcher_cases

    from paradyse_lab.runtime.launch.local import launch

    with socket.socket() as sock:  # the ranks' own connection, not a process group: rank 0 listens on it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(UserInputError, match="bad input on rank 1 only"):
        launch(launcher_cases.one_rank_refuses, 2, (port,))
    assert "Traceback" not in capfd.readouterr().err


def test_a_uniform_dataset_trains_lengths_across_its_range():
    """uniform:8:16 on one rank (layout unit 1): the steps' lengths are 8..16, not 16 every step."""
    log = train(TrainOptions(**BASE, steps=12))
    lengths = [r["seq_len"] for r in log]
    assert all(8 <= n <= 16 for n in lengths) and len(set(lengths)) >= 4, lengths


def test_max_len_1_is_refused_before_any_step(seen):
    with pytest.raises(UserInputError, match="--max-len must be 0 .* or at least 2"):
        train(TrainOptions(**{**BASE, "max_len": 1, "steps": 2}))
    assert not seen.calls


@pytest.mark.parametrize("kind", ["tokens.jsonl", "lengths.txt", "packed.txt"])
def test_a_dataset_of_one_token_documents_is_refused(tmp_path, seen, kind):
    """1-token documents hold no next token to predict: a step of only such documents trains nothing (it
    logged loss 0.0 with exit 0); refused with one line before the first step."""
    path = tmp_path / kind
    path.write_text({"tokens.jsonl": "[5]\n[7]\n", "lengths.txt": "1\n1\n1\n", "packed.txt": "1 1\n1\n"}[kind])
    with pytest.raises(UserInputError, match="nothing to train on"):
        train(TrainOptions(**{**BASE, "dataset": f"file:{path}", "steps": 2}))
    assert not seen.calls


def test_max_len_1_from_the_command_line_is_one_line_and_exit_2(capsys):
    from paradyse_lab.cli import main

    assert main(["train", "--model", BASE["model"], "--dataset", "uniform:8:16", "--max-len", "1",
                 "--steps", "2", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--max-len" in err


HOLD_LOCK = """
import fcntl, os, socket, sys
os.makedirs(sys.argv[1], exist_ok=True)
with open(os.path.join(sys.argv[1], ".lock"), "a+") as f:  # the protocol of runtime/checkpoints/folder.py folder_lock
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    f.truncate(0)
    f.write(f"pid {os.getpid()} on {socket.gethostname()}\\n")
    f.flush()
    print("held", flush=True)
    sys.stdin.read()  # until the test closes the pipe
"""


def test_a_second_run_on_a_locked_checkpoint_folder_is_refused_naming_the_holder(tmp_path, seen, capsys):
    """Another process holds DIR's lock (as a running `train --checkpoint-dir DIR` does for its whole run):
    this run is refused before its first step with one line naming that process; once it ends, DIR is free."""
    from paradyse_lab.cli import main

    ck = tmp_path / "ck"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(ck)], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserInputError, match=f"is in use by another run \\(pid {holder.pid} on "):
            _run(tmp_path, steps=2)
        assert main(["train", "--model", BASE["model"], "--dataset", "uniform:8:16", "--max-len", "16",
                     "--steps", "2", "--no-progress", "--checkpoint-dir", str(ck)]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and f"pid {holder.pid}" in err and "--checkpoint-dir" in err
        assert not seen.calls and not any(p.name.startswith(("step-", ".tmp-")) for p in ck.iterdir())
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert [r["step"] for r in _run(tmp_path, steps=2)] == [1, 2]  # the lock ended with its holder


def _log_steps(path) -> list[str]:
    lines = path.read_text().splitlines()
    assert lines[0].startswith("step,") and not any(line.startswith("step,") for line in lines[1:])
    return [line.split(",")[0] for line in lines[1:]]


def test_resume_with_more_steps_keeps_the_workload_and_one_log_row_per_step(tmp_path):
    """A run of 6 steps (checkpoints at 2, 4, 6) loses steps 4 and 6; resumed with --steps 8 it retrains steps
    3-6 at the lengths they had (the workload of the first run, not one re-sampled for 8 steps), and the log
    holds each step once: the rows after the checkpoint are replaced, not appended twice."""
    log_file = tmp_path / "log.csv"
    first = _run(tmp_path, steps=6, log_file=str(log_file))
    for step in (4, 6):
        shutil.rmtree(tmp_path / "ck" / f"step-{step:06d}")
    resumed = _run(tmp_path, steps=8, resume=True, log_file=str(log_file))
    assert [r["step"] for r in resumed] == [3, 4, 5, 6, 7, 8]
    assert [r["seq_len"] for r in resumed[:4]] == [r["seq_len"] for r in first[2:]]
    assert _log_steps(log_file) == [str(n) for n in range(1, 9)]
    with pytest.raises(UserInputError, match="--steps 4 is below the step 8 of the checkpoint"):
        _run(tmp_path, steps=4, resume=True, log_file=str(log_file))


def test_a_new_run_never_appends_to_an_existing_log(tmp_path):
    log_file = tmp_path / "log.csv"
    train(TrainOptions(**BASE, steps=2, log_file=str(log_file)))
    before = log_file.read_text()
    with pytest.raises(UserInputError, match="--log-file .* holds the log of another run"):
        train(TrainOptions(**BASE, steps=2, seed=1, log_file=str(log_file)))
    assert log_file.read_text() == before and _log_steps(log_file) == ["1", "2"]


@pytest.mark.xdist_group("gloo-worlds")
def test_a_killed_rank_is_named_not_its_peers_echo(capfd):
    """SIGKILL of rank 1 is reported as rank 1 killed by SIGKILL, in one line, without rank 0's traceback of
    the closed connection. (On the distributed tests' pytest worker, after the worlds, as tests/conftest.py's
    `WORLDS_GROUP`: its ranks fork from that worker's fork server, which imported torch already, ~3 CPU s less
    than a server of its own.)"""
    import launcher_cases

    from paradyse_lab.runtime.launch.local import launch
    from paradyse_lab.runtime.launch.ranks import rendezvous_store

    store = rendezvous_store()  # the ranks meet at it, as a launcher's do
    port = store.port
    with pytest.raises(RunStopped, match="rank 1 .*SIGKILL") as err:
        launch(launcher_cases.one_rank_killed, 2, (port,), ("torch", "torch.distributed"))  # imported once
    assert "\n" not in str(err.value) and "Traceback" not in capfd.readouterr().err


def test_finiteness_check_reads_the_device_once_not_per_parameter():
    """`finite_on_every_rank` counts non-finite tensors on the device and the host reads one number: one
    `aten._local_scalar_dense` (the op behind .item() / bool()) for 40 parameters, and it still finds one NaN."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from paradyse_lab.runtime.training.step_health import finite_on_every_rank

    class HostReads(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                HostReads.count += 1
            return func(*args, **(kwargs or {}))

    params = [torch.randn(3, 2) for _ in range(40)] + [None, torch.empty(0)]
    with HostReads():
        assert finite_on_every_rank(params, None)
    assert HostReads.count == 1
    params[17][1, 0] = float("nan")
    assert not finite_on_every_rank(params, None)


def test_markov_tokens_walk_the_same_chain_on_host_ints():
    """`markov_tokens` (the synthetic workload's ids) is the seeded chain out[i] = table[out[i-1], choice[i]], walked
    on host ints (a per-token tensor loop took seconds per 131K-token step): the same ids as that loop."""
    import torch

    from paradyse_lab.runtime.training.step_inputs import markov_tokens

    got = markov_tokens(3, 5, 2, 300, 97)
    table = torch.randint(0, 97, (97, 4), generator=torch.Generator().manual_seed(3 + 12345))
    gen = torch.Generator().manual_seed(3 * 1_000_003 + 5)
    choice = torch.multinomial(torch.tensor([0.85, 0.05, 0.05, 0.05]), 600, True, generator=gen).view(2, 300)
    want = torch.empty(2, 300, dtype=torch.long)
    want[:, 0] = torch.randint(0, 97, (2,), generator=gen)
    for i in range(1, 300):
        want[:, i] = table[want[:, i - 1], choice[:, i]]
    assert torch.equal(got, want)


def test_a_resume_keeps_the_optional_settings_a_checkpoint_was_trained_with(tmp_path, trained):
    """--accumulate (and the schedule, clipping, tokenizer and data order) are settings of the run: a checkpoint
    written with --accumulate 2 is not resumed under the default 1 (it would index other micro-steps), and one
    written with the defaults is not resumed under --accumulate 2."""
    _run(tmp_path, steps=2, accumulate=2)
    with pytest.raises(UserInputError, match="accumulate=2; this run has 1"):
        _run(tmp_path, steps=4, resume=True)
    _copy_run(trained, 2, tmp_path / "b")
    with pytest.raises(UserInputError, match="accumulate=1; this run has 2"):
        _run(tmp_path / "b", steps=4, resume=True, accumulate=2)


def _as_written_before_long_documents(ck) -> None:
    """Each checkpoint's meta.json under `ck` without `long_documents`, as versions before the option wrote it."""
    for meta_file in ck.glob("step-*/meta.json"):
        meta = json.loads(meta_file.read_text())
        meta.pop("long_documents", None)
        meta_file.write_text(json.dumps(meta))


def test_a_checkpoint_before_long_documents_resumes_where_no_document_is_chunked(tmp_path, trained):
    """A checkpoint that does not record --long-documents (written as if `cut`) resumes under today's default
    `chunk` with a sampled workload (one sequence per step, never chunked); a token file's run, whose documents
    are chunked, is still refused."""
    _copy_run(trained, 2, tmp_path)
    _as_written_before_long_documents(tmp_path / "ck")
    log = _run(tmp_path, steps=4, resume=True)
    assert [r["step"] for r in log] == [3, 4]
    path = tmp_path / "tokens.jsonl"
    path.write_text("".join(json.dumps([(7 * i + j) % 90 + 1 for j in range(n)]) + "\n"
                            for i, n in enumerate((30, 7, 12, 19))))
    tokens = tmp_path / "tok"
    _run(tokens, steps=2, dataset=f"file:{path}")
    _as_written_before_long_documents(tokens / "ck")
    with pytest.raises(UserInputError, match="long_documents='cut'; this run has 'chunk'"):
        _run(tokens, steps=4, resume=True, dataset=f"file:{path}")


def test_the_runtime_loop_takes_a_plain_options_object():
    """paradyse_lab.runtime.training.loop.train reads the run's settings as attributes: a `SimpleNamespace` of the
    application's
    `TrainOptions` trains the same steps to the same losses as the dataclass itself."""
    from dataclasses import asdict
    from functools import partial
    from types import SimpleNamespace

    from paradyse_lab.app.training import plan_policy
    from paradyse_lab.runtime.training.loop import train as run_training

    opts = TrainOptions(**BASE, steps=2)
    plain = SimpleNamespace(**asdict(opts))
    logs = [run_training(o, policy_for=partial(plan_policy, o, quiet=True)) for o in (opts, plain)]
    assert [r["loss"] for r in logs[0]] == [r["loss"] for r in logs[1]]
    assert [r["seq_len"] for r in logs[0]] == [r["seq_len"] for r in logs[1]] and len(logs[0]) == 2


def test_a_checkpoint_without_a_newer_setting_was_written_with_its_default():
    """The settings older checkpoints do not record (runtime/checkpoints/dcp.py `OPTIONAL_SETTINGS`) are compared
    with the values those runs had: today's `TrainOptions` defaults, so a run at the defaults resumes them; but
    long documents, which those runs cut while today's default chunks them (other steps: such a checkpoint resumes
    with --long-documents cut)."""
    from dataclasses import fields

    from paradyse_lab.runtime.checkpoints.dcp import OPTIONAL_SETTINGS

    defaults = {f.name: f.default for f in fields(TrainOptions)} | {"long_documents": "cut"}
    assert OPTIONAL_SETTINGS == {key: defaults[key] for key in OPTIONAL_SETTINGS}
