"""The checkpointed layer (paradyse_lab/costmodel/layer_checkpoint.py): a block decision that recomputes and offloads
moves one hidden-state copy per layer to host memory, not two. Its runtime (exact against the reference, its one
set per layer moved and prefetched): tests/runtime/runtime_cases.py `model-tiled-offload-*`, `llama-tiled-offload`."""

import pytest

from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.core.layer_graph import LayerGraph
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import StrategyOption, options
from paradyse_lab.costmodel import AnalyticCostModel
from paradyse_lab.costmodel.layer_checkpoint import checkpointed_layer, checkpoints_layer
from paradyse_lab.costmodel.lowering import problem_from_cost_model

LLAMA = get_model("llama3-8b")
H100 = get_cluster("h100-80gb-x8")
SEQ = 4 * 2**20
INPUT = SEQ // 8 * LLAMA.hidden * LLAMA.dtype_bytes  # one hidden-state copy [t, h] per GPU


def _problem(granularity):
    opts = options(("megatron_cz", "metp"), recompute=True, tiled=True, offload=True)
    return problem_from_cost_model(LayerGraph(LLAMA, granularity), AnalyticCostModel(LLAMA, H100), SEQ, options=opts)


def test_a_recomputed_offloaded_block_moves_its_input_alone_and_a_sublayer_plan_two_per_layer():
    block, sub = _problem("block"), _problem("sublayer")
    name = "metp+recompute+tiled+offload"
    assert set(block.host_bytes[:, block.options.index(name)]) == {INPUT}
    per_layer = sub.host_bytes[0::2, sub.options.index(name.replace("+tiled", ""))] + \
        sub.host_bytes[1::2, sub.options.index("metp+tiled+offload")]
    assert set(per_layer) == {2 * INPUT}
    assert set(block.kept_bytes[:, block.options.index(name)]) == {0}


def test_its_time_is_its_sublayers_and_its_working_set_holds_the_recomputed_attention():
    cm = AnalyticCostModel(LLAMA, H100)
    option = StrategyOption.parse("metp+recompute+tiled+offload")
    layer = checkpointed_layer(cm, option, SEQ)
    attn = cm.sublayer("attention", option, SEQ)
    mlp = cm.sublayer("mlp", StrategyOption.parse("metp+recompute+tiled"), SEQ)
    assert layer.time_s == pytest.approx(attn.time_s + mlp.time_s)
    plain_attention = cm.sublayer("attention", StrategyOption("metp"), SEQ).kept_bytes
    assert layer.transient_bytes >= plain_attention + mlp.transient_bytes + 2 * INPUT
    assert layer.host_bytes == INPUT and layer.kept_bytes == 0


def test_only_a_whole_layer_that_recomputes_and_offloads_is_checkpointed():
    both = ("attention", "mlp")
    assert checkpoints_layer(StrategyOption.parse("metp+recompute+offload"), both)
    assert not checkpoints_layer(StrategyOption.parse("metp+recompute+offload"), ("attention",))
    assert not checkpoints_layer(StrategyOption.parse("metp+tiled+offload"), both)
    assert not checkpoints_layer(StrategyOption.parse("metp+recompute"), both)
    with pytest.raises(ValueError, match="needs \\+recompute and \\+offload"):
        checkpointed_layer(AnalyticCostModel(LLAMA, H100), StrategyOption("metp", offload=True), SEQ)
