"""Ulysses x ring (`ulysses_ring:a`, runtime/strategies/ulysses_ring.py) in the world of 4 ranks, as 1 x 4, 2 x 2
and 4 x 1: one attention sub-layer (output, input and parameter gradients against the reference; the bytes sent
and kept against the cost model's schedule), over packed documents, and whole models (GPT-2 and LLaMA-shaped with
grouped-query attention, also packed) whose plans switch between the factorisations and the 1-D strategies at
every sub-layer: logits, loss, every gradient, every sub-layer's bytes, and no byte moved between sub-layers.
Read by runtime_cases.py, which adds these cases to its world."""

from __future__ import annotations

from runtime_cases import (
    _check_model,
    llama_config,
    packed_model_case,
    packed_sublayer_case,
    reference,
    reference_and_model,
    sublayer_case,
)

from paradyse_lab.runtime import ParallelGPT

DEGREES = (1, 2, 4)
"""Head degrees a at p = 4: 1 x 4 (the ring alone), 2 x 2, 4 x 1 (the all-to-all alone)."""


def usp(a: int) -> str:
    return f"ulysses_ring:{a}"


def model_case(plans, causal: bool = True):
    """gpt2-tiny's first 2 layers (12 heads, multi-head attention) under `plans` (`_check_model`)."""
    def case(rank: int, p: int, group) -> None:
        _, _, ref, model = reference_and_model(causal, group, 2)
        _check_model(model, ref, plans, rank, p, group)
    return case


def llama_case(kv_heads: int, plans):
    """The LLaMA-shaped model (12 heads, `kv_heads` K/V heads: replicated up to a where fewer, RoPE) under
    `plans` (`_check_model`)."""
    def case(rank: int, p: int, group) -> None:
        cfg = llama_config(kv_heads)
        sd, ref = reference(cfg)
        _check_model(ParallelGPT(cfg, group, state_dict=sd), ref, plans, rank, p, group)
    return case


CASES = {}
for _a in DEGREES:
    # the whole kept set (the offload case counts it byte for byte), the bytes sent, every gradient
    CASES[f"usp-{_a}-sublayer-attention-causal-offload"] = sublayer_case(usp(_a), "attention", True, False,
                                                                        offload=True)
    CASES[f"usp-{_a}-packed-sublayer-causal"] = packed_sublayer_case(usp(_a), True, False)
CASES["usp-2-sublayer-attention-bidir-recompute"] = sublayer_case(usp(2), "attention", False, True)
CASES["usp-2-packed-sublayer-bidir"] = packed_sublayer_case(usp(2), False, False)
CASES["usp-model-switching-causal"] = model_case([  # one option per sub-layer: attention, MLP, attention, MLP
    [usp(2), "megatron_ts", usp(4) + "+recompute", usp(1)],
    ["megatron_cz", usp(2) + "+recompute", "ulysses_z", "metp"],
    [usp(1) + "+recompute", usp(4), usp(2) + "+offload", "megatron_ts+recompute"],
])
CASES["usp-model-per-layer-bidir"] = model_case([[usp(4), usp(2) + "+recompute"]], causal=False)
CASES["usp-llama-kv2-gqa"] = llama_case(2, [  # a = 4 replicates each K/V head twice, a = 2 splits them
    [usp(4), usp(2) + "+recompute"],
    [usp(2), "megatron_cz", usp(4) + "+recompute+offload", "ulysses_z+tiled"],
])
CASES["usp-llama-kv1-gqa"] = llama_case(1, [[usp(2), usp(4) + "+recompute"]])
CASES["usp-packed-llama-kv2-gqa"] = packed_model_case([[usp(2), usp(4) + "+recompute"],  # per-document RoPE
                                                       [usp(4), "megatron_ts", usp(1), usp(2)]], True, llama_kv=2)


def after_uneven_groups_case(rank: int, p: int, group) -> None:
    """The subgroups made after a group that only some ranks registered (`new_group([0, 1])`: ranks 2 and 3 are
    not members, so their count of groups falls behind): the sub-layer still meets and matches the reference."""
    import torch.distributed as dist

    from paradyse_lab.runtime.strategies import ulysses_ring

    dist.new_group([0, 1])  # every rank calls it; ranks 2 and 3 register nothing
    ulysses_ring._GROUPS.clear()  # the split is made again, after the uneven group
    sublayer_case(usp(2), "attention", True, False)(rank, p, group)


CASES["usp-after-uneven-groups"] = after_uneven_groups_case
ONLY_AT = {name: (4,) for name in CASES}
"""Every case at p = 4, the world that factors three ways (1 x 4, 2 x 2, 4 x 1)."""
