"""Two torchrun "nodes" on this machine train with grouped steps: `torchrun --nnodes 2 --nproc-per-node 1`
twice (--node-rank 0 and 1, c10d rendezvous at localhost on a free port), `paradyse-lab train --global-batch 2
--group-size 1`: the two nodes' gloo ranks form one world of two groups of one (each group on its own node, the
step's gather and gradient reduce across the nodes), and the run logs its steps. One process per node: the
fewest that make two nodes (groups of two in a world of four are the distributed tests' grouped cases).

The two agents are forked from one interpreter that imported torchrun's module and the train command's ranks'
modules once (forked_runs.py); each agent is torchrun's (its options, its c10d rendezvous, the environment it
gives its rank), and forks its rank from itself (torchrun_forked_ranks.py: the CLI's `main` on `train ...`)
instead of starting a `python -m paradyse_lab train` process that imports torch again (~4 CPU s a rank). The
test runs in the distributed worlds' xdist group, after the worlds: that interpreter is then forked from the
worker's fork server, which imported torch and the runtime already (~3 CPU s less than a new interpreter). How
such a process ends once it joined a group is test_rank_teardown.py's
`test_a_command_whose_process_joined_a_group_ends_through_end_process`.

Run: `python -m pytest -q tests/runtime/test_torchrun_nodes.py` (two agents and two ranks: four CPU processes).
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

import pytest
from dist_harness import free_port
from forked_runs import Forked

from paradyse_lab.cli.train_command import RANK_PRELOAD

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300
pytestmark = pytest.mark.xdist_group("gloo-worlds")
"""On the worker of the distributed worlds (tests/conftest.py's `WORLDS_GROUP`), after them: `Forked` forks the
agents' interpreter from that worker's fork server."""
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _node(forked: Forked, node_rank: int, port: int, log: Path) -> None:
    """One torchrun agent (one "node") of one process running `train`: `python -m torch.distributed.run ...` as a
    forked run."""
    argv = ["--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(node_rank), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"localhost:{port}", "--rdzv-id", "grouped-two-nodes",
            "--rdzv-conf", f"is_host={int(node_rank == 0)}",
            "-m", "paradyse_lab", "train", "--model", "gpt2-tiny", "--dataset", "uniform:8:16", "--max-len", "16",
            "--steps", "2", "--global-batch", "2", "--group-size", "1", "--policy", "static:megatron_ts",
            "--no-progress"] + (["--log-file", str(log)] if node_rank == 0 else [])
    forked.add(f"node{node_rank}", argv, ROOT, ENV, module="torchrun_forked_ranks")


def test_two_torchrun_nodes_train_grouped_steps(tmp_path):
    log = tmp_path / "log.csv"
    port = free_port()
    forked = Forked(tmp_path, ENV, TIMEOUT_S, preload=["torchrun_forked_ranks", *RANK_PRELOAD])
    for node_rank in (0, 1):
        _node(forked, node_rank, port, log)
    forked.start()
    try:
        failure = forked.wait()
    finally:
        forked.close()
    assert failure is None, failure
    ends = forked.ends()
    for node_rank in (0, 1):
        code = ends.get(f"node{node_rank}", {}).get("code")
        assert code == 0, f"node {node_rank} exited {code}:\n{forked.stderr(f'node{node_rank}')[-3000:]}"
    rows = list(csv.DictReader(log.open()))
    assert [r["step"] for r in rows] == ["1", "2"], rows
    for row in rows:
        assert row["plan"].startswith("groups 1/1: "), row["plan"]  # one world of 2 ranks: two groups of one
        assert row["docs"] == "2" and math.isfinite(float(row["loss"])), row
