"""Ulysses x ring (`ulysses_ring:a`, runtime/strategies/ulysses_ring.py) in the world of 4 ranks, as 1 x 4, 2 x 2
and 4 x 1: one attention sub-layer (output, input and parameter gradients against the reference; the bytes sent
and kept against the cost model's schedule), over packed documents, and whole models (GPT-2 and LLaMA-shaped with
grouped-query attention, also packed) whose plans switch between the factorisations and the 1-D strategies at
every sub-layer: logits, loss, every gradient, every sub-layer's bytes, and no byte moved between sub-layers;
the operations a rank runs under every factorisation and option equal its meta-tensor trace (what the replay cost
model prices), and its collectives the bytes counted and scheduled. Read by runtime_cases.py, which adds these
cases to its world."""

from __future__ import annotations

import dataclasses

import torch
from runtime_cases import (
    _check_model,
    llama_config,
    packed_model_case,
    packed_sublayer_case,
    reference,
    reference_and_model,
    sublayer_case,
)

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.schedules import schedule
from paradyse_lab.costmodel.types import CollectiveCall
from paradyse_lab.runtime import ParallelGPT
from paradyse_lab.runtime.comm.record import count_bytes
from paradyse_lab.runtime.trace.op_trace import run_sublayer_step, sublayer_inputs, trace_sublayer, warm_trace

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

TRACE_CFG = ModelSpec(vocab_size=128, max_positions=64, hidden=48, heads=12, layers=2, causal=True, name="runtime")
"""12 heads of d = 4 over 16 positions: the smallest sub-layer every factorisation of p = 4 splits."""
TRACE_S = 16


def trace_llama(kv_heads: int) -> ModelSpec:
    """The LLaMA shape of the runtime cases (RMSNorm, SwiGLU, RoPE, no biases) at `TRACE_CFG`'s size."""
    return dataclasses.replace(llama_config(kv_heads), hidden=48, max_positions=64)


def sent_by_op(ops) -> dict[str, int]:
    """Bytes this rank sends by collective ('p2p' for the exchanges) in a list of traced `Op`s, each collective's
    by `CollectiveCall`'s ring convention (what the cost model and the byte counter record)."""
    out: dict[str, int] = {}
    for op in ops:
        if op.kind in ("collective", "p2p"):
            key = "p2p" if op.kind == "p2p" else op.name
            out[key] = out.get(key, 0) + (op.nbytes if op.kind == "p2p" else
                                          CollectiveCall(op.name, op.nbytes, op.group).sent_bytes)
    return out


def ops_traced_case(*runs: tuple[ModelSpec, str, tuple[str, ...]]):
    """For each (model, sub-layer kind, option names) of `runs`: the operations this rank dispatches for one
    sub-layer under each option, forward and backward on the world's gloo group, equal the trace of the same rank
    made on meta tensors through a fake process group, one for one in order (the replay cost model prices that
    trace); the bytes its collectives send are the ones the wrapped collectives counted and the cost model's
    schedule (every rank sends the same under these even splits)."""
    def case(rank: int, p: int, group) -> None:
        bad = []
        for cfg, kind, names in runs:
            for option in map(StrategyOption.parse, names):
                traced = trace_sublayer(cfg, kind, option, TRACE_S, p, dtype="fp32", rank=rank)
                params, x = sublayer_inputs(cfg, kind, TRACE_S, p, 1, torch.float32, "cpu", rank)
                counted = []

                def step(option=option, cfg=cfg, kind=kind, params=params, x=x, counted=counted):
                    with count_bytes() as counter:
                        run_sublayer_step(cfg, kind, option, TRACE_S, group, params, x)
                    counted.append(counter.total())
                ran = warm_trace(step)
                what = f"{option.name} {kind} ({'rope' if cfg.rope_theta else 'learned positions'})"
                if ran != traced:
                    first = next((i for i, (a, b) in enumerate(zip(ran, traced)) if a != b),
                                 min(len(ran), len(traced)))
                    bad.append(f"{what}: ran {len(ran)} ops, traced {len(traced)}; first difference at {first}: "
                               f"{ran[first:first + 1]} vs {traced[first:first + 1]}")
                want: dict[str, int] = {}
                for call in schedule(cfg.with_dtype("fp32"), kind, option, TRACE_S, 1, p).collectives:
                    want[call.op] = want.get(call.op, 0) + call.sent_bytes
                want = {k: v for k, v in want.items() if v}
                if not sent_by_op(traced) == counted[-1] == want:
                    bad.append(f"{what}: bytes sent traced {sent_by_op(traced)}, counted {counted[-1]}, "
                               f"scheduled {want}")
        assert not bad, "\n".join(bad)
    return case


CASES["usp-ops-traced"] = ops_traced_case(  # each degree and each flag at least once (every option costs a
    # rank ~0.2 s): the flags wrap every degree alike (the recomputation, the offload's hooks), so one option
    # carries a degree and a flag
    (TRACE_CFG, "attention", (usp(1) + "+offload", usp(2) + "+recompute", usp(4))),
    # ZeRO-3's MLP at every degree (its weights span all p), the same as ulysses_z's (its flags: op_trace_cases)
    (TRACE_CFG, "mlp", (usp(4) + "+offload",)),
    (trace_llama(2), "attention", (usp(4) + "+recompute",)),  # rotary positions, 2 K/V heads replicated to 4
)
ONLY_AT = {name: (4,) for name in CASES}
"""Every case at p = 4, the world that factors three ways (1 x 4, 2 x 2, 4 x 1)."""
