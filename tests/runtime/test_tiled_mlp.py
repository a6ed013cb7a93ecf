"""The tiled MLP on one process in bf16 (runtime/strategies/tiled_mlp.py): 16 chunks of a SwiGLU MLP give the output and
gradients of the fp32 reference within bf16's tolerance under every strategy's implementation, its weight
gradients summed over the chunks in fp32 (one rounding, not one per chunk). Exactness in fp32 at p = 1..4 and
the bytes against the cost model: tests/runtime/runtime_cases.py (`*tiled*`)."""

import pytest
import torch
from torch.testing import assert_close

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.runtime.comm.fake_group import FakeGroup
from paradyse_lab.runtime.model.parallel_gpt import STRATEGY_MODULES
from paradyse_lab.runtime.model.reference import init_state_dict, reference_sublayer
from paradyse_lab.runtime.model.sublayer import make_ctx
from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES, shard_sublayer
from paradyse_lab.runtime.strategies.tiled_mlp import run_tiled_mlp

CFG = ModelSpec(vocab_size=64, max_positions=256, hidden=64, heads=4, layers=2, ffn_hidden=128, kv_heads=2,
                norm="rmsnorm", ffn_kind="swiglu", bias=False, rope_theta=10000.0, tied=False, name="runtime")


@pytest.mark.parametrize("strategy", sorted(STRATEGY_MODULES))
def test_sixteen_bf16_chunks_stay_close_to_the_fp32_reference(strategy):
    full = {n.rpartition(".")[2]: v for n, v in init_state_dict(CFG, 3).items() if n.startswith("layers.0.mlp.")}
    gen = torch.Generator().manual_seed(4)
    x, dy = torch.randn(1, 256, CFG.hidden, generator=gen), torch.randn(1, 256, CFG.hidden, generator=gen)
    xr, pr = x.clone().requires_grad_(), {n: v.clone().requires_grad_() for n, v in full.items()}
    reference_sublayer(xr, pr, "mlp", CFG).backward(dy)
    params = [v.bfloat16().requires_grad_() for v in (shard_sublayer(full, "mlp", 0, 1)[n] for n in PARAM_NAMES)]
    xl = x.bfloat16().requires_grad_()
    ctx = make_ctx(CFG, FakeGroup(1, 0), "mlp", 256)
    run_tiled_mlp(STRATEGY_MODULES[strategy].TILED_MLP, ctx, 16, xl, params).backward(dy.bfloat16())
    assert_close(xl.grad.float(), xr.grad, rtol=2e-2, atol=2e-2)
    for name, q in zip(PARAM_NAMES, params):
        if q.numel():
            assert q.grad.dtype == torch.bfloat16
            assert_close(q.grad.float(), pr[name].grad, rtol=3e-2, atol=3e-2, msg=lambda m, n=name: f"{n}: {m}")
