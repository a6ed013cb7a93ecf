import pytest

from paradyse_lab.core.layer_graph import LayerGraph
from paradyse_lab.core.model_spec import PRESETS
from paradyse_lab.errors import UserInputError


def test_block_graph_is_a_chain_from_embedding_to_head():
    import networkx as nx  # here, as in paradyse_lab/core/layer_graph.py: not paid while collecting the file

    g = LayerGraph(PRESETS["gpt2-tiny"], "block")
    order = list(nx.topological_sort(g.graph))
    assert order[0] == "embedding" and order[-1] == "head"
    assert order[1:3] == ["attn.0", "mlp.0"] and len(order) == 2 + 2 * 4
    assert g.num_decisions == 4 and nx.is_directed_acyclic_graph(g.graph)
    assert g.graph.nodes["attn.2"]["decision"] == g.graph.nodes["mlp.2"]["decision"] == 2
    assert g.decision_edges() == [(0, 1), (1, 2), (2, 3)]


def test_sublayer_graph_decides_attention_and_mlp_separately():
    g = LayerGraph(PRESETS["gpt2-tiny"], "sublayer")
    assert g.num_decisions == 8
    assert [d.label for d in g.decisions[:3]] == ["L0.attn", "L0.mlp", "L1.attn"]
    assert g.graph.nodes["mlp.0"]["decision"] == 1 and len(g.decision_edges()) == 7


def test_bad_granularity():
    with pytest.raises(UserInputError, match="valid: block, sublayer"):
        LayerGraph(PRESETS["gpt2-tiny"], "layer")
