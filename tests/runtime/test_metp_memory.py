"""The plain (untiled) metp MLP's working memory in bf16 on one process: nothing of the tiled MLP's chunk sums.

The tiled MLP (runtime/strategies/tiled_mlp.py) sums each chunk's weight gradients in fp32
(`sublayer.grad_accumulator`) and
makes its output before the chunks; paradyse_lab/costmodel/techniques.py `tiled_mlp_work` counts those fp32 sums.
The plain sub-layer runs every position at once: one GEMM per weight gradient, nothing to sum, and its transient
(costmodel/strategy_work.py `_metp`) counts no fp32 sums. When the plain metp MLP went through the tiled code with one
chunk, its backward held fp32 [n1, h] and [f, h] sums where it needed the bf16 [f, h] gradient alone, 10 f h bytes
more at its peak (llama1b, h 2048, f 8192: 160 MiB, the peak a one-GPU metp step on an H100 rose by), and its
forward held a [t, h] output beside the shard's [t, f] intermediates.
"""

import torch
from profiler_peak import peak_above_start
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.runtime.comm.fake_group import FakeGroup
from paradyse_lab.runtime.model.reference import init_state_dict
from paradyse_lab.runtime.model.sublayer import make_ctx, run_sublayer
from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES, shard_sublayer
from paradyse_lab.runtime.strategies import metp
from paradyse_lab.runtime.strategies.tiled_mlp import run_tiled_mlp

T, H, F = 64, 64, 256
"""t h < f h: no activation-sized fp32 tensor (the RMSNorm's) is as large as a weight gradient."""
CFG = ModelSpec(vocab_size=64, max_positions=T, hidden=H, heads=4, layers=1, ffn_hidden=F, kv_heads=2,
                norm="rmsnorm", ffn_kind="swiglu", bias=False, rope_theta=10000.0, tied=False, name="runtime")


class _Float32Sizes(TorchDispatchMode):
    """The element counts of the fp32 tensors the operators inside it return."""

    def __init__(self):
        super().__init__()
        self.sizes: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.sizes += [t.numel() for t in tree_flatten(out)[0]
                       if isinstance(t, torch.Tensor) and t.dtype == torch.float32]
        return out


def _bf16_case():
    full = {n.rpartition(".")[2]: v for n, v in init_state_dict(CFG, 3).items() if n.startswith("layers.0.mlp.")}
    params = [v.bfloat16().requires_grad_() for v in (shard_sublayer(full, "mlp", 0, 1)[n] for n in PARAM_NAMES)]
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(1, T, H, generator=gen).bfloat16().requires_grad_()
    dy = torch.randn(1, T, H, generator=gen).bfloat16()
    return x, params, dy, make_ctx(CFG, FakeGroup(1, 0), "mlp", T)


def _largest_fp32_in_backward(tile: int) -> int:
    x, params, dy, ctx = _bf16_case()
    y = run_tiled_mlp(metp.TILED_MLP, ctx, tile, x, params) if tile else run_sublayer(metp.MLP, ctx, False, x, params)
    with _Float32Sizes() as seen:
        y.backward(dy)
    return max(seen.sizes, default=0)


def test_plain_metp_mlp_backward_sums_no_weight_gradient_in_fp32():
    weight = F * H  # the smallest weight matrix's elements (w2 [f, h]; w1 [2f, h] with SwiGLU)
    assert _largest_fp32_in_backward(T // 2) >= 2 * weight  # two chunks: the fp32 sums (the check sees them)
    assert _largest_fp32_in_backward(0) < weight


def test_plain_metp_mlp_forward_makes_no_output_beside_its_intermediates(tmp_path):
    x, params, _, ctx = _bf16_case()
    with torch.no_grad():  # the forwards alone (what each keeps for a backward differs)
        tiled = peak_above_start(lambda: run_tiled_mlp(metp.TILED_MLP, ctx, T, x, params), tmp_path)
        plain = peak_above_start(lambda: run_sublayer(metp.MLP, ctx, False, x, params), tmp_path)
    assert plain == tiled - T * H * 2, (plain, tiled)  # the tiled one's output [t, h] made before its one chunk
