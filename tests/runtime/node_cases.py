"""Distributed cases of a world of several nodes (runtime/comm/nodes.py), at p = 4 as two nodes of two ranks, the
nodes told as torchrun tells them (GROUP_RANK, LOCAL_WORLD_SIZE) but set here by each rank: `calibrate`'s link
stage measures the collectives inside each node and over the rails across the nodes, and writes a cluster file
of 2 nodes x 2 GPUs whose inter-node keys are the rails' fit (paradyse_lab/cluster/measured.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import os

import pandas as pd

from paradyse_lab.app.measure.calibrate_collectives import INTER_NODE_OPS, measure_collectives
from paradyse_lab.app.measure.calibrate_options import Budget, CalibrateOptions
from paradyse_lab.cluster.files import load_cluster_toml
from paradyse_lab.cluster.measured import Measurements, fit_inter_node, measured_cluster_toml
from paradyse_lab.cluster.spec import COLLECTIVES
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm.nodes import node_layout


@contextlib.contextmanager
def _as_torchrun_node(node: int, per_node: int):
    """torchrun's GROUP_RANK and LOCAL_WORLD_SIZE for this process, restored afterwards."""
    env = {"GROUP_RANK": str(node), "LOCAL_WORLD_SIZE": str(per_node)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def calibrate_two_nodes_case(rank: int, p: int, group) -> None:
    import torch

    with _as_torchrun_node(rank // 2, 2):
        nodes = node_layout(group)
    assert (nodes.nodes, nodes.per_node) == (2, 2)
    assert comm.size(nodes.node_group) == comm.size(nodes.rail_group) == 2
    assert comm.global_rank(nodes.node_group, 1) // 2 == rank // 2  # a node's ranks share the node
    assert comm.global_rank(nodes.rail_group, 1) % 2 == rank % 2  # a rail's ranks share the local rank
    opts = CalibrateOptions(out="", nproc=p, model="gpt2-tiny", max_len=16, budget_s=60.0, repeats=1)
    # gpt2-tiny's shape at an eighth of its width: its buffers need the 2 smallest sizes, the two points each fit
    # takes (gpt2-tiny's: 5, to 1 MiB); a size past the second, measured while the budget lasts, is
    # calibrate-validate-loop's (3 sizes there). Each size is 5 timed calls with a barrier per kind and group.
    spec = dataclasses.replace(get_model("gpt2-tiny"), hidden=12, ffn_hidden=48)
    budget, cpu = Budget(60.0), torch.device("cpu")
    intra = measure_collectives(opts, spec, budget, cpu, torch.float32, nodes.node_group, None)
    inter = measure_collectives(opts, spec, budget, cpu, torch.float32, nodes.rail_group, None, INTER_NODE_OPS)
    assert {r["op"] for r in intra} == set(COLLECTIVES) and {r["op"] for r in inter} == set(INTER_NODE_OPS)
    assert all(r["ranks"] == 2 for r in intra + inter)
    if rank != 0:
        return
    points = {name: {op: list(zip(g["buffer_bytes"], g["median_s"])) for op, g in pd.DataFrame(rows).groupby("op")}
              for name, rows in (("intra", intra), ("inter", inter))}
    m = Measurements(ranks=4, gpu_name="cpu", memory_bytes=2**30, hbm_bytes_per_s=1e10,
                     gemm=[(64, 1e9, 1e-3)], attention=[(16, True, 1e6, 1e-4)], collectives=points["intra"],
                     nodes=2, inter_node=points["inter"], provenance={"name": "two faked nodes"})
    text = measured_cluster_toml(m)
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"two-nodes-{os.getpid()}.toml")
    with open(path, "w") as f:
        f.write(text)
    try:
        cl = load_cluster_toml(path)
    finally:
        os.remove(path)
    link = fit_inter_node(2, points["inter"])
    assert (cl.gpus, cl.nodes, cl.node_gpus) == (4, 2, 2)
    assert abs(cl.inter_node_bytes_per_s / link.busbw_bytes_per_s - 1) < 1e-5 and cl.inter_node_bytes_per_s > 0
    assert abs(cl.inter_node_alpha_s - link.alpha_s) <= 1e-5 * link.alpha_s + 1e-12
    assert link.points == sum(len(v) for v in points["inter"].values())


CASES = {"calibrate-two-nodes-faked": calibrate_two_nodes_case}
ONLY_AT = {name: (4,) for name in CASES}
