"""`train` checks its limits before its first step: on a CPU without --cluster it plans against this host's
memory over its ranks (not an A100's), and a run whose longest step has no plan within the budget is refused in
one line (exit 2) unless --allow-infeasible."""

import pytest
from micro_gpt import one_thread, write_micro  # noqa: F401 - one_thread: an autouse fixture

from paradyse_lab.cli import main
from paradyse_lab.units import GIB


@pytest.fixture(autouse=True)
def cpu_host(monkeypatch):
    """A CPU machine of 23.5 GiB, whatever this one has."""
    import torch

    from paradyse_lab.app import host_cluster

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(host_cluster, "host_memory_bytes", lambda: int(23.5 * GIB))


def test_a_model_beyond_the_host_is_refused_before_its_first_step(capsys):
    code = main(["train", "--model", "llama3-8b", "--dataset", "uniform:64:128", "--steps", "1", "--no-progress"])
    _, err = capsys.readouterr()
    assert code == 2
    assert "cluster this CPU host" in err and "budget 22.50 GiB per GPU" in err
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and "no plan fits" in errors[0] and "--allow-infeasible" in errors[0]
    assert "Traceback" not in err


def test_an_infeasible_plan_is_refused_unless_allowed(tmp_path, capsys):
    argv = ["train", "--model", write_micro(tmp_path), "--dataset", "uniform:32:48", "--steps", "1", "--no-progress",
            "--budget-gib", "0.000001", "--policy", "dynamic:dp"]
    assert main(argv) == 2
    _, err = capsys.readouterr()
    assert "no plan fits" in err
    assert main(argv + ["--allow-infeasible"]) == 0


def test_a_given_cluster_is_planned_against_as_it_is(tmp_path, capsys):
    assert main(["train", "--model", write_micro(tmp_path), "--dataset", "uniform:32:48", "--steps", "1",
                 "--no-progress", "--cluster", "a100-80gb-x8", "--policy", "static:megatron_ts"]) == 0
    _, err = capsys.readouterr()
    assert "cluster a100-80gb-x8 (A100" in err
