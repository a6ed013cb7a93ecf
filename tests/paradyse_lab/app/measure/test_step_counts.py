"""paradyse_lab/app/measure/step_counts.py: the runtime's launches and memory-bound bytes, counted, not fitted."""

from __future__ import annotations

import pytest

from paradyse_lab.model_spec import ModelSpec

SPEC = ModelSpec(name="gpt2-count", hidden=32, heads=4, layers=2, ffn_hidden=128, vocab_size=64,
                 max_positions=64, dtype="fp32")


@pytest.fixture(scope="module")
def cfg():
    from runtime.reference import GPTConfig

    return GPTConfig.from_model_spec(SPEC)


@pytest.mark.parametrize("option", ["metp+recompute"])  # the most launches: ring, shards, recompute
def test_bytes_are_linear_in_the_tokens_and_launches_constant(cfg, option):
    from paradyse_lab.app.measure.step_counts import _linear, _sublayer_tally

    for kind in ("attention", "mlp"):
        a, b, c = (_sublayer_tally(cfg, kind, option, 2, s) for s in (8, 16, 32))
        count = _linear(a, b, (8, 16))
        assert count.launches > 0 and a[0] == b[0] == c[0]
        assert count.bytes_at(32) == pytest.approx(c[1], rel=1e-12)  # exact, so two lengths suffice


def test_gemms_attention_and_collectives_are_left_to_their_own_measurements(cfg):
    import torch

    from paradyse_lab.app.measure.step_counts import counting
    from runtime import attention, comm

    before = (attention._run, comm.all_gather)
    a, w = torch.randn(16, 32), torch.randn(32, 32)
    with counting() as tally:
        a @ w  # a GEMM
        a.view(32, 16).t()  # views
        attention._run  # noqa: B018 (patched inside)
        x = a + 1.0  # one element-wise op: reads a, writes x
    assert tally.launches == 1 and tally.bytes == 2 * a.numel() * 4 and x.shape == a.shape
    assert (attention._run, comm.all_gather) == before  # restored


def test_step_counts_cover_every_option_the_rest_of_the_model_and_the_optimizer(cfg):
    from paradyse_lab.app.measure.step_counts import step_counts

    counts = step_counts(cfg, 2, ["megatron_ts", "megatron_cz"], (8, 16))
    assert set(counts) == {"megatron_ts.attention", "megatron_ts.mlp", "megatron_cz.attention", "megatron_cz.mlp",
                           "fixed", "optimizer"}
    assert counts["fixed"].launches > 0 and counts["fixed"].bytes_per_token > 0
    params = sum(p.numel() for p in __import__("runtime.model", fromlist=["ParallelGPT"]).ParallelGPT(
        cfg, __import__("runtime.fake_group", fromlist=["FakeGroup"]).FakeGroup(2, 0)).parameters())
    # AdamW reads and writes every parameter, its gradient and both moments several times over
    assert counts["optimizer"].bytes_at(8) > 4 * 4 * params and counts["optimizer"].bytes_per_token == 0
    # ZeRO-3 rebuilds the full weights from their shards: bytes that do not grow with the tokens
    assert counts["megatron_cz.mlp"].bytes_fixed > counts["megatron_ts.mlp"].bytes_fixed
