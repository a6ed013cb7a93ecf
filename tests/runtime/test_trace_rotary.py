"""The rotary tables of a step are made once, not in every sub-layer: the warm meta trace of a LLaMA-shaped
attention sub-layer (what the replay cost model prices per sub-layer) computes no cos or sin, under the strategies
that rotate the local tokens (ulysses_z, Ulysses x ring), the gathered ones (megatron_ts) and the tensor group's
tokens in ring order (tensor x context parallel, whose permuted positions are derived once per step).

Run: `python -m pytest -q tests/runtime/test_trace_rotary.py`."""

from __future__ import annotations

import pytest

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.runtime.trace.op_trace import trace_sublayer

LLAMA = ModelSpec(vocab_size=64, max_positions=64, hidden=48, heads=12, layers=2, ffn_hidden=96, kv_heads=4,
                  norm="rmsnorm", ffn_kind="swiglu", bias=False, rope_theta=1000.0, tied=False, name="runtime")


@pytest.mark.parametrize("option", ["megatron_cp:2", "megatron_cp:4+recompute", "ulysses_ring:2", "ulysses_z",
                                    "megatron_ts"])
def test_a_traced_rotary_attention_makes_no_rotary_tables(option):
    ops = trace_sublayer(LLAMA, "attention", StrategyOption.parse(option), 16, 4, dtype="fp32", rank=1)
    assert any(o.kind == "attention" for o in ops)
    assert not [o.name for o in ops if o.name in ("cos", "sin")]

