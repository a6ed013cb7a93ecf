"""Two torchrun "nodes" on this machine train with grouped steps: `torchrun --nnodes 2 --nproc-per-node 1`
twice (--node-rank 0 and 1, c10d rendezvous at localhost on a free port), `paradyse-lab train --global-batch 2
--group-size 1`: the two nodes' gloo ranks form one world of two groups of one (each group on its own node, the
step's gather and gradient reduce across the nodes), and the run logs its steps. One process per node: the
fewest that make two nodes (groups of two in a world of four: tests/runtime/grouped_cases.py).

Run: `python -m pytest -q tests/runtime/test_torchrun_nodes.py` (two agents and two ranks: four CPU processes).
"""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from pathlib import Path

from dist_harness import free_port

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300


def _node(node_rank: int, port: int, log: Path) -> subprocess.Popen:
    """One torchrun agent (one "node") of one process running `train`."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
           "--node-rank", str(node_rank), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"localhost:{port}",
           "--rdzv-id", "grouped-two-nodes", "--rdzv-conf", f"is_host={int(node_rank == 0)}",
           "-m", "paradyse_lab", "train", "--model", "gpt2-tiny", "--dataset", "uniform:8:16", "--max-len", "16",
           "--steps", "2", "--global-batch", "2", "--group-size", "1", "--policy", "static:megatron_ts",
           "--no-progress"] + (["--log-file", str(log)] if node_rank == 0 else [])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_two_torchrun_nodes_train_grouped_steps(tmp_path):
    log = tmp_path / "log.csv"
    port = free_port()
    nodes = [_node(r, port, log) for r in (0, 1)]
    outputs = []
    try:
        for proc in nodes:
            outputs.append(proc.communicate(timeout=TIMEOUT_S)[0])
    finally:
        for proc in nodes:
            if proc.poll() is None:
                proc.kill()
    for node_rank, (proc, out) in enumerate(zip(nodes, outputs)):
        assert proc.returncode == 0, f"node {node_rank} exited {proc.returncode}:\n{out[-3000:]}"
    rows = list(csv.DictReader(log.open()))
    assert [r["step"] for r in rows] == ["1", "2"], rows
    for row in rows:
        assert row["plan"].startswith("groups 1/1: "), row["plan"]  # one world of 2 ranks: two groups of one
        assert row["docs"] == "2" and math.isfinite(float(row["loss"])), row
