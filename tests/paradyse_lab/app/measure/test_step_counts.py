"""paradyse_lab/app/measure/step_counts.py: the runtime's launches and memory-bound bytes, counted, not fitted."""

from __future__ import annotations

import pytest

from paradyse_lab.core.model_spec import ModelSpec

SPEC = ModelSpec(name="gpt2-count", hidden=32, heads=4, layers=2, ffn_hidden=128, vocab_size=64,
                 max_positions=64, dtype="fp32")


@pytest.fixture(scope="module")
def cfg():

    return SPEC


@pytest.mark.parametrize("option", ["metp+recompute"])  # the most launches: ring, shards, recompute
def test_bytes_are_linear_in_the_tokens_and_launches_constant(cfg, option):
    from paradyse_lab.app.measure.step_counts import _linear, _sublayer_tally

    for kind in ("attention", "mlp"):
        a, b, c = (_sublayer_tally(cfg, kind, option, 2, s) for s in (8, 16, 32))
        count = _linear(a, b, (8, 16))
        assert count.launches > 0 and a[0] == b[0] == c[0]
        assert count.bytes_at(32) == pytest.approx(c[1], rel=1e-12)  # exact, so two lengths suffice


def test_every_dispatch_launches_and_only_memory_bound_operators_move_bytes(cfg):
    import torch

    from paradyse_lab.app.measure.step_counts import counting
    from paradyse_lab.runtime.attention import kernels as attention
    from paradyse_lab.runtime.comm import collectives as comm
    from paradyse_lab.runtime.comm.fake_group import FakeGroup

    before = (attention._run, comm.all_gather)
    a, w = torch.randn(16, 32), torch.randn(32, 32)
    with counting() as tally:
        a @ w  # a GEMM: dispatched (1), its bytes priced by the GEMM curve
        a.view(32, 16).t()  # two views: dispatched (2), nothing moved
        comm.all_gather(a, FakeGroup(2, 0))  # a collective: neither (the alpha-beta fit prices it)
        x = a + 1.0  # one element-wise op (1): reads a, writes x
    assert tally.launches == 4 and tally.bytes == 2 * a.numel() * 4 and x.shape == a.shape
    assert (attention._run, comm.all_gather) == before  # restored


def test_step_counts_cover_every_option_the_rest_of_the_model_and_the_optimizer(cfg):
    from paradyse_lab.app.measure.step_counts import step_counts

    counts = step_counts(cfg, 2, ["megatron_ts", "megatron_cz"], (8, 16))
    assert set(counts) == {"megatron_ts.attention", "megatron_ts.mlp", "megatron_cz.attention", "megatron_cz.mlp",
                           "fixed", "optimizer"}
    assert counts["fixed"].launches > 0 and counts["fixed"].bytes_per_token > 0
    from paradyse_lab.runtime.comm.fake_group import FakeGroup
    from paradyse_lab.runtime.model.parallel_gpt import ParallelGPT

    params = sum(p.numel() for p in ParallelGPT(cfg, FakeGroup(2, 0)).parameters())
    # AdamW reads and writes every parameter, its gradient and both moments several times over
    assert counts["optimizer"].bytes_at(8) > 4 * 4 * params and counts["optimizer"].bytes_per_token == 0
    # ZeRO-3 rebuilds the full weights from their shards: bytes that do not grow with the tokens
    assert counts["megatron_cz.mlp"].bytes_fixed > counts["megatron_ts.mlp"].bytes_fixed


def test_the_step_epilogue_moves_a_hand_counted_50_bytes_per_parameter():
    """What a step runs after its backward (`step_epilogue`), with plain SGD for a hand count: per fp32 parameter
    element, the gradient norm's pow (reads 4, writes 4) and sum (reads 4), SGD's add_ (reads the weight and the
    gradient, writes the weight: 12) and the finite check as aten runs isfinite on the CPU: abs (8), ne (5),
    eq (9), mul (3), all (1) = 26; 12 + 12 + 26 = 50. The rest (the [1] flags and sums) does not grow with it."""
    import types

    import torch

    from paradyse_lab.app.measure.step_counts import counting, step_epilogue
    from paradyse_lab.runtime.comm.fake_group import FakeGroup

    def tally(n):
        w = torch.nn.Parameter(torch.randn(n))
        w.grad = torch.randn(n)
        model = types.SimpleNamespace(named_parameters=lambda: [("layers.0.attention.w_qkv", w)],
                                      parameters=lambda: [w], vocab_parallel=False)
        with counting() as t:
            step_epilogue(model, torch.optim.SGD([w], lr=0.1), FakeGroup(2, 0))
        return t.launches, t.bytes

    (launches_a, bytes_a), (launches_b, bytes_b) = tally(1000), tally(3000)
    assert launches_a == launches_b > 10
    assert bytes_b - bytes_a == 50 * 2000


def test_the_dispatch_benchmark_prices_one_counted_dispatch():
    import torch

    from paradyse_lab.app.measure.calibrate_kernels import DISPATCH_CHAIN_BLOCKS, dispatch_chain, measure_dispatch_s
    from paradyse_lab.app.measure.step_counts import counting

    run = dispatch_chain(torch.device("cpu"), torch.float32)
    with counting() as tally:
        run()
    # per block at least layer_norm, gelu, view, transpose, reshape, mul, add forward and their backward
    assert tally.launches >= 7 * DISPATCH_CHAIN_BLOCKS
    assert 0 < measure_dispatch_s(torch.device("cpu"), torch.float32) < 1.0


def test_the_runtime_step_prices_its_counted_launches_less_what_it_moves(cfg, monkeypatch):
    """runtime_dispatch_s: (median seconds of each strategy's step - its counted bytes and 3 x the GEMM weights'
    bytes at the bandwidth) summed, over the launches counted in the same steps."""
    import contextlib

    import torch

    from paradyse_lab.app.measure import step_counts
    from paradyse_lab.runtime.comm.fake_group import FakeGroup
    from paradyse_lab.runtime.model.parallel_gpt import ParallelGPT

    monkeypatch.setattr(step_counts, "measure", lambda fn, device, **kw: (fn(), 0.01)[1:] + (5,))  # 10 ms a step
    model = ParallelGPT(cfg, FakeGroup(2, 0), seed=0)
    weights = 3 * 4 * sum(w.numel() for w in list(model.layers.parameters()) + [model.wte] if w.dim() == 2)
    ids = torch.zeros(1, 2, dtype=torch.long)  # [b, t]: 4 tokens over 2 ranks
    tallies = []
    for option in ("megatron_ts", "metp"):
        for counted in (False, True):  # the second step is counted, as the function counts it
            model.zero_grad(set_to_none=True)
            with step_counts.counting() if counted else contextlib.nullcontext() as tally:
                model(ids, [option] * cfg.layers, ids)[1].backward()
        tallies.append((tally.launches, tally.bytes))
    bandwidth = 1e12  # what the steps move takes nanoseconds: the price is the time over the launches
    got = step_counts.runtime_dispatch_s(cfg, 2, 4, ("megatron_ts", "metp"), bandwidth)
    moved = sum(b + weights for _, b in tallies) / bandwidth
    assert got == pytest.approx((2 * 0.01 - moved) / sum(n for n, _ in tallies), rel=1e-6)
    assert tallies[1][0] > tallies[0][0] > 0  # METP launches more than Megatron-TS
    slow = step_counts.runtime_dispatch_s(cfg, 2, 4, ("megatron_ts",), 1.0)  # moving bytes takes all the time
    assert slow == 0.0


def test_the_epilogue_is_timed_with_every_gradient_present(cfg, monkeypatch):
    from paradyse_lab.app.measure import step_counts

    seen = []

    def epilogue(model, optimizer, group):  # what the timed calls find: every gradient, then zeroed
        seen.append(all(w.grad is not None for w in model.parameters()))
        for w in model.parameters():
            w.grad = None

    monkeypatch.setattr(step_counts, "step_epilogue", epilogue)
    assert step_counts.epilogue_s(cfg, 2, repeats=3) >= 0 and seen == [True] * 4  # one untimed call, 3 timed
    monkeypatch.undo()
    assert 0 < step_counts.epilogue_s(cfg, 2, repeats=1) < 10


def test_a_reshape_of_a_gemm_output_moves_nothing():
    """aten's matmul on a 3-D input reshapes the mm's output with `_unsafe_view`, a view aten does not mark as
    one: dispatched (launches), but no bytes (it was charged its input and output as traffic before)."""
    import torch

    from paradyse_lab.app.measure.step_counts import counting

    x, w = torch.randn(2, 8, 32), torch.randn(32, 16)
    with counting() as tally:
        y = x @ w  # [2, 8, 32] -> view [16, 32] -> mm [16, 16] -> _unsafe_view [2, 8, 16]
    assert y.shape == (2, 8, 16) and tally.launches >= 3 and tally.bytes == 0



def test_measure_times_its_target_and_at_target_scale_0_its_fewest_repeats(monkeypatch):
    """kernel_bench.measure: as many timed calls as fit in target_s (within min..max); with TARGET_SCALE 0 (what
    calibrate-validate-loop sets) min_repeats, whatever target_s."""
    import torch

    from paradyse_lab.app.measure import kernel_bench

    calls = []
    monkeypatch.setattr(kernel_bench, "_timed", lambda fn, device: (fn(), 0.25)[1])  # 0.25 s a call
    cpu = torch.device("cpu")
    assert kernel_bench.measure(lambda: calls.append(1), cpu, warmup=1, max_repeats=50, min_repeats=2,
                                target_s=1.0) == (0.25, 4)
    assert len(calls) == 1 + 4  # the warm-up call and the 4 that fit in 1 s
    monkeypatch.setattr(kernel_bench, "TARGET_SCALE", 0.0)
    calls.clear()
    assert kernel_bench.measure(lambda: calls.append(1), cpu, warmup=1, max_repeats=50, min_repeats=2,
                                target_s=1.0) == (0.25, 2)
    assert len(calls) == 1 + 2
