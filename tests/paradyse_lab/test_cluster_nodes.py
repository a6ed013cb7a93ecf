"""Clusters of several nodes: TOML keys and their validation, `--gpus` beyond a node, hierarchical collectives."""

import pytest

from paradyse_lab.cluster.files import cluster_with_gpus, load_cluster_toml
from paradyse_lab.cluster.presets import PRESETS
from paradyse_lab.costmodel import formulas as F
from paradyse_lab.errors import UserInputError


def _toml(tmp_path, text: str):
    path = tmp_path / "c.toml"
    path.write_text(text)
    return load_cluster_toml(path)


def test_gpus_beyond_the_base_node_without_node_keys_is_refused(tmp_path):
    with pytest.raises(UserInputError, match="gpus = 16 is more than one node.*nodes = 2"):
        _toml(tmp_path, 'base = "a100-80gb-x8"\ngpus = 16\n')


def test_nodes_key_gives_a_cluster_of_several_nodes(tmp_path):
    c = _toml(tmp_path, 'base = "h100-80gb-x8"\nnodes = 4\ninter_node_bandwidth_gbps = 40\n'
                        'inter_node_latency_us = 5\n')
    assert (c.gpus, c.node_gpus, c.nodes) == (32, 8, 4)
    assert c.inter_node_bytes_per_s == 40e9 and c.inter_node_alpha_s == pytest.approx(5e-6)
    assert _toml(tmp_path, 'base = "a100-80gb-x8"\ngpus = 4\n').nodes == 1  # part of one node


@pytest.mark.parametrize("text, match", [
    ('base = "a100-80gb-x8"\nnodes = 2\ngpus = 24\n', "gpus = 24 but nodes x gpus_per_node"),
    ('base = "a100-80gb-x8"\nnodes = 0\n', "nodes must be a whole number >= 1"),
    ('base = "a100-80gb-x8"\nnodes = 2\ngpus_per_node = 6\n', "gpus_per_node must be a power of two"),
    ('base = "a100-80gb-x8"\nnodes = 2\ninter_node_bandwidth_gbps = 0\n', "needs inter_node_bandwidth_gbps"),
    ('base = "a100-80gb-x8"\nnodes = 2\ninter_node_latency_us = -1\n', "inter_node_latency_us must be"),
    ('base = "a100-80gb-x8"\ngpus = 16\ngpus_per_node = 3\n', "whole number of nodes"),
])
def test_bad_node_keys_are_one_line_errors(tmp_path, text, match):
    with pytest.raises(UserInputError, match=match):
        _toml(tmp_path, text)


def test_gpus_flag_beyond_a_node_uses_the_inter_node_link():
    c = cluster_with_gpus(PRESETS["a100-80gb-x8"], 32)
    assert (c.nodes, c.node_gpus) == (4, 8) and c.device == "a100-80gb-x8"
    assert cluster_with_gpus(PRESETS["a100-80gb-x8"], 4).nodes == 1
    with pytest.raises(UserInputError, match="whole number of its 8-GPU nodes"):
        cluster_with_gpus(PRESETS["a100-80gb-x8"], 12)


def test_a_group_inside_a_node_pays_nvlink_and_one_across_nodes_the_nics():
    one, many = PRESETS["h100-80gb-x8"], PRESETS["h100-80gb-16x8"]
    for op in ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "p2p"):
        assert F.collective_time_s(many, op, 64e6, 8) == F.collective_time_s(one, op, 64e6, 8)
        assert F.collective_time_s(many, op, 64e6, 16) > F.collective_time_s(one, op, 64e6, 8)
    # Two phases by hand: NVLink reduce-scatter of the whole buffer, then 1/8 of it between 2 nodes over the NICs.
    s = 64e6
    intra = F.collective_time_s(one, "reduce_scatter", s, 8)
    inter = many.inter_node_alpha_s + 0.5 * (s / 8) / many.inter_node_bytes_per_s
    assert F.collective_time_s(many, "reduce_scatter", s, 16) == pytest.approx(intra + inter)
    # A ring step that crosses nodes runs at the NIC's pace.
    assert F.collective_time_s(many, "p2p", s, 16) == pytest.approx(many.inter_node_alpha_s + s / 47e9)
