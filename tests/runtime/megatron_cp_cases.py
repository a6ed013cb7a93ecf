"""Tensor x context parallel (`megatron_cp:a`, runtime/strategies/megatron_cp.py) in the world of 4 ranks, as 1 x 4,
2 x 2 and 4 x 1: one attention and one MLP sub-layer (output, input and parameter gradients against the reference;
the bytes sent and kept against the cost model's schedule), the tiled MLP, an attention over packed documents, and
whole models (GPT-2 and LLaMA-shaped with grouped-query attention, also packed) whose plans switch between the
factorisations, ulysses_ring and the 1-D strategies at every sub-layer: logits, loss, every gradient, every
sub-layer's bytes, and no byte moved between sub-layers; the operations a rank runs under every factorisation and
option equal its meta-tensor trace (what the replay cost model prices), and its collectives the bytes counted and
scheduled. Read by runtime_cases.py, which adds these cases to its world."""

from __future__ import annotations

from runtime_cases import packed_model_case, packed_sublayer_case, sublayer_case
from ulysses_ring_cases import TRACE_CFG, llama_case, model_case, ops_traced_case, trace_llama

DEGREES = (1, 2, 4)
"""Tensor degrees a at p = 4: 1 x 4 (the ring alone, ZeRO-3 weights), 2 x 2 (a shard exchange), 4 x 1 (megatron_ts)."""


def tpcp(a: int) -> str:
    return f"megatron_cp:{a}"


CASES = {}
for _a in DEGREES:
    for _kind in ("attention", "mlp"):
        # the whole kept set (the offload case counts it byte for byte), the bytes sent, every gradient
        CASES[f"tpcp-{_a}-sublayer-{_kind}-causal-offload"] = sublayer_case(tpcp(_a), _kind, True, False,
                                                                           offload=True)
    CASES[f"tpcp-{_a}-packed-sublayer-causal"] = packed_sublayer_case(tpcp(_a), True, False)
CASES["tpcp-2-sublayer-attention-bidir-recompute"] = sublayer_case(tpcp(2), "attention", False, True)
CASES["tpcp-2-sublayer-mlp-tiled"] = sublayer_case(tpcp(2), "mlp", True, False, tiled=True)
CASES["tpcp-2-packed-sublayer-bidir"] = packed_sublayer_case(tpcp(2), False, False)
CASES["tpcp-model-switching-causal"] = model_case([  # one option per sub-layer: attention, MLP, attention, MLP
    [tpcp(2), "megatron_ts", tpcp(4) + "+recompute", tpcp(1)],
    ["ulysses_ring:2", tpcp(2) + "+recompute", "ulysses_z", tpcp(4)],
    [tpcp(1) + "+recompute", tpcp(2) + "+tiled", tpcp(2) + "+offload", "megatron_cz+recompute"],
])
CASES["tpcp-model-per-layer-bidir"] = model_case([[tpcp(4), tpcp(2) + "+recompute"]], causal=False)
CASES["tpcp-llama-kv4-gqa"] = llama_case(4, [  # 3 query heads per K/V head; a = 4: one K/V head per rank
    [tpcp(4), tpcp(2) + "+recompute"],
    [tpcp(2), "ulysses_ring:4", tpcp(1) + "+recompute+offload", tpcp(4) + "+tiled"],
])
CASES["tpcp-llama-kv2-gqa"] = llama_case(2, [[tpcp(2), tpcp(1) + "+recompute"]])
CASES["tpcp-packed-llama-kv4-gqa"] = packed_model_case([[tpcp(2), tpcp(4) + "+recompute"],  # per-document RoPE
                                                        [tpcp(4), "megatron_cz", tpcp(1), tpcp(2)]], True, llama_kv=4)
CASES["tpcp-ops-traced"] = ops_traced_case(  # each degree and each flag at least once in each sub-layer kind
    # (every option costs a rank ~0.2 s): the flags wrap every degree alike, so one option carries a degree and a flag
    (TRACE_CFG, "attention", (tpcp(1) + "+recompute", tpcp(2), tpcp(4) + "+offload")),
    (TRACE_CFG, "mlp", (tpcp(1) + "+offload", tpcp(2) + "+tiled", tpcp(4) + "+recompute")),
    (trace_llama(4), "attention", (tpcp(2) + "+recompute",)),  # rotary positions, 4 K/V heads, SwiGLU
    (trace_llama(4), "mlp", (tpcp(4),)),
)
ONLY_AT = {name: (4,) for name in CASES}
"""Every case at p = 4, the world that factors three ways (1 x 4, 2 x 2, 4 x 1)."""
