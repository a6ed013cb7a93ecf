"""Ulysses with uneven heads (`ulysses_uneven`, runtime/strategies/ulysses_uneven.py) in the world of 4 ranks, where
4 divides none of the head counts: 6 and 5 heads (multi-head attention; ranks hold 2, 2, 1, 1 and 2, 1, 1, 1 heads),
6 query heads over 2 K/V heads (rank 1's query heads read both K/V heads, each K/V head goes to three ranks) and 12
over 3 (ulysses_z's K/V rule fails at p = 4; ranks 1 and 2 run two kernel calls, one per K/V head they share).
- one attention sub-layer, causal and bidirectional, recomputed, offloaded, and over a pack of documents (with
  RoPE by position in each document): output, input and parameter gradients against the single-device reference;
  the bytes each collective sent and the bytes kept (and offloaded) by the busiest rank equal the cost model's,
  which prices the busiest rank (the ranks differ: each records what it sends or receives, whichever is more);
- whole models whose plans mix it with the 1-D and 2-D strategies at every sub-layer: logits, loss, every
  gradient, every sub-layer's bytes (busiest rank), nothing sent between sub-layers; and over packs;
- the same uneven split inside the head groups of Ulysses x ring (`ulysses_ring:2` as 2 x 2 over 5 heads, with
  and without GQA), sub-layers (also packed) and whole models;
- the operations a rank runs under ulysses_uneven equal the meta-tensor trace the replay cost model prices.
Read by runtime_cases.py, which adds these cases to its world.
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch
import torch.distributed as dist
from runtime_cases import (
    PACKS,
    TILE,
    TOL,
    B,
    S,
    check_sharded_attention,
    grad_of,
    llama_config,
    packed_model_case,
    predicted_bytes,
    reference,
    reference_run,
)
from torch.testing import assert_close

from paradyse_lab.app.measure.profile_memory import KeptRecorder
from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.schedules import schedule
from paradyse_lab.runtime import ParallelGPT, gather_sequence, shard_sequence
from paradyse_lab.runtime.comm.record import count_bytes
from paradyse_lab.runtime.model.parallel_gpt import run_option
from paradyse_lab.runtime.model.reference import reference_sublayer
from paradyse_lab.runtime.model.sublayer import make_ctx
from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES, shard_state_dict, shard_sublayer
from paradyse_lab.runtime.strategies.offload import Offloader
from paradyse_lab.runtime.trace.op_trace import run_sublayer_step, sublayer_inputs, trace_sublayer, warm_trace

UNEVEN = "ulysses_uneven"


def gpt(heads: int, causal: bool = True) -> ModelSpec:
    """A 2-layer GPT-2-shaped model of `heads` heads of d = 16 (vocab 512)."""
    return ModelSpec(vocab_size=512, max_positions=64, hidden=16 * heads, heads=heads, layers=2, causal=causal,
                     name="runtime")


def llama(heads: int, kv_heads: int, causal: bool = True) -> ModelSpec:
    """The LLaMA-shaped model of the runtime cases (RMSNorm, SwiGLU, RoPE) with `heads` heads of d = 12 over
    `kv_heads` K/V heads."""
    return dataclasses.replace(llama_config(kv_heads), hidden=12 * heads, heads=heads, causal=causal)


CONFIGS = {"gpt6": gpt(6), "gpt5": gpt(5), "llama6-kv2": llama(6, 2), "llama12-kv3": llama(12, 3),
           "llama5-kv1": llama(5, 1)}
USP2 = "ulysses_ring:2"
"""Ulysses x ring as 2 x 2: its head groups of 2 split 5 heads unevenly (3 and 2 per member; one K/V head copied
to both members of llama5-kv1), the ring over 2 attends over each member's heads."""


def busiest(values: list[int], group) -> list[int]:
    """Each value's maximum over the ranks (every rank passes its values in the same order)."""
    most = torch.tensor(values, dtype=torch.int64)
    if most.numel():
        dist.all_reduce(most, op=dist.ReduceOp.MAX, group=group)
    return most.tolist()


def busiest_bytes(counter, group, tag: str | None = None) -> dict[str, int]:
    """Bytes by op of the calls under `tag` (None: all), each call's the most any rank recorded."""
    calls = [(op, n) for op, n, t in counter.calls if tag is None or t == tag]
    out: dict[str, int] = {}
    for (op, _), n in zip(calls, busiest([n for _, n in calls], group)):
        out[op] = out.get(op, 0) + n
    return {k: v for k, v in out.items() if v}


def _sublayer_reference(cfg: ModelSpec, seq: int, cu: torch.Tensor | None):
    """({name: parameter}, x, dy, (y, dx, {name: gradient})) of layer 1's attention of `cfg` on seeded x, dy."""
    full = {n.rpartition(".")[2]: v for n, v in reference(cfg)[0].items() if n.startswith("layers.1.attn.")}
    gen = torch.Generator().manual_seed(13)
    x, dy = torch.randn(B, seq, cfg.hidden, generator=gen), torch.randn(B, seq, cfg.hidden, generator=gen)
    xr = x.clone().requires_grad_()
    pr = {n: v.clone().requires_grad_() for n, v in full.items()}
    yr = reference_sublayer(xr, pr, "attention", cfg, *(() if cu is None else (cu.to(torch.int32),)))
    yr.backward(dy)
    return full, x, dy, (yr.detach(), xr.grad, {n: grad_of(pr[n]) for n in PARAM_NAMES})


def _packed_ctx(cfg: ModelSpec, group, rank: int, p: int):
    """(sequence length, document offsets, the attention's Ctx) of the first pack of `PACKS` on p ranks."""
    from paradyse_lab.runtime.model.layout import gathered_positions
    from paradyse_lab.runtime.model.packed import cu_seqlens, document_of, local_documents, pack_sequence

    pack = pack_sequence(PACKS[0], p)
    seq, cu = pack.padded_len, cu_seqlens(pack)
    positions = all_positions = doc_ids = None
    if cfg.rope_theta:  # rotary models rotate by the position within each document
        doc_ids, positions = local_documents(cu, seq, p, rank)
        all_positions = document_of(cu, gathered_positions(seq, p, cu))[1]
    return seq, cu, make_ctx(cfg, group, "attention", seq, "case", None, positions, all_positions, doc_ids, cu)


def sublayer_case(name: str, causal: bool = True, recompute: bool = False, offload: bool = False,
                  packed: bool = False, strategy: str = UNEVEN):
    """One attention sub-layer of `CONFIGS[name]` under `strategy` against the reference: output, gradients,
    the busiest rank's bytes sent, kept (and moved to host memory with `offload`) against the cost model's."""
    option = StrategyOption(strategy, recompute=recompute, offload=offload)
    cfg = dataclasses.replace(CONFIGS[name], causal=causal)

    def case(rank: int, p: int, group) -> None:
        if packed:
            seq, cu, ctx = _packed_ctx(cfg, group, rank, p)
        else:
            seq, cu, ctx = S, None, make_ctx(cfg, group, "attention", S, "case")
        full, x, dy, reference_out = _sublayer_reference(cfg, seq, cu)
        params = [v.clone().requires_grad_() for v in (shard_sublayer(full, "attention", rank, p)[n]
                                                        for n in PARAM_NAMES)]
        xl = shard_sequence(x.clone(), 1, group, cu).requires_grad_()
        offloader = Offloader(xl.device)
        with count_bytes() as counter:
            with KeptRecorder(exclude=params) as kept:
                with offloader.sublayer("case", params) if offload else contextlib.nullcontext():
                    y = run_option(option, ctx, xl, params, TILE)
            y.backward(shard_sequence(dy, 1, group, cu))
        check_sharded_attention(y, xl, params, reference_out, rank, p, group, cu)
        want_sent = predicted_bytes(cfg, "attention", option.name, p, seq)
        assert busiest_bytes(counter, group) == want_sent, (busiest_bytes(counter, group), want_sent)
        want = schedule(cfg.with_dtype("fp32"), "attention", option, seq, B, p)
        host = offloader.stats.to_host.get("case", 0) if offload else 0
        most_kept, most_host = busiest([kept.nbytes, host], group)
        assert most_kept == want.kept_bytes, (most_kept, want.kept_bytes, list(kept.kept.values()))
        assert most_host == want.host_bytes, (most_host, want.host_bytes)
    return case


def model_case(name: str, plans):
    """The whole model `CONFIGS[name]` under `plans` (one option per layer, or per sub-layer) against the
    reference: logits, loss, every gradient; the busiest rank's bytes of every sub-layer are the cost model's and
    no byte moves between sub-layers."""
    cfg = CONFIGS[name]

    def case(rank: int, p: int, group) -> None:
        sd, ref = reference(cfg)
        model = ParallelGPT(cfg, group, state_dict=sd)
        ids, labels, logits_r, loss_r, full_grads = reference_run(ref, None, rank, group)
        ref_grads = shard_state_dict(full_grads, rank, p, model.vocab_parallel)
        for plan in plans:
            model.zero_grad()
            with count_bytes() as counter:
                logits, loss = model(shard_sequence(ids, 1, group), plan, shard_sequence(labels, 1, group))
                loss.backward()
            assert_close(gather_sequence(logits.detach(), 1, group), logits_r, **TOL)
            assert_close(loss.detach(), loss_r, **TOL)
            for n, q in model.named_parameters():
                assert_close(grad_of(q), ref_grads[n], **TOL, msg=lambda m, n=n, plan=plan: f"{plan}: grad {n}: {m}")
            assert counter.total("") == {}, counter.total("")  # switching between sub-layers moves nothing
            per_sublayer = len(plan) == 2 * cfg.layers
            for index in range(cfg.layers):
                for j, kind in enumerate(("attention", "mlp")):
                    option = plan[2 * index + j] if per_sublayer else plan[index]
                    got = busiest_bytes(counter, group, f"layers.{index}.{kind}")
                    assert got == predicted_bytes(cfg, kind, option, p), (plan, index, kind, got)
    return case


CASES = {}
for _name in CONFIGS:
    CASES[f"uneven-{_name}-sublayer-causal"] = sublayer_case(_name)
CASES["uneven-gpt5-sublayer-bidir-recompute"] = sublayer_case("gpt5", causal=False, recompute=True)
CASES["uneven-llama12-kv3-sublayer-bidir"] = sublayer_case("llama12-kv3", causal=False)
CASES["uneven-llama6-kv2-sublayer-offload"] = sublayer_case("llama6-kv2", offload=True)
CASES["uneven-gpt5-packed-sublayer"] = sublayer_case("gpt5", packed=True)
CASES["uneven-llama12-kv3-packed-sublayer"] = sublayer_case("llama12-kv3", packed=True)
CASES["uneven-gpt6-model-switching"] = model_case("gpt6", [  # one option per sub-layer: attention, MLP, ...
    [UNEVEN, "megatron_ts", UNEVEN + "+recompute", "metp"],
    ["megatron_cz", UNEVEN + "+recompute", "ulysses_ring:2", UNEVEN + "+tiled"],
    [UNEVEN, UNEVEN + "+recompute"],  # one per layer (the second a checkpointed layer)
])
CASES["uneven-gpt5-model"] = model_case("gpt5", [[UNEVEN + "+recompute", UNEVEN],
                                                 ["megatron_cz", "ulysses_z", UNEVEN, UNEVEN + "+recompute"]])
CASES["uneven-llama6-kv2-model"] = model_case("llama6-kv2", [[UNEVEN, "megatron_cz+recompute"],
                                                             [UNEVEN + "+recompute", "ulysses_ring:2", UNEVEN,
                                                              "megatron_ts"]])
CASES["uneven-packed-llama12-kv3-model"] = packed_model_case([  # per-document RoPE, GQA where ulysses_z cannot
    [UNEVEN, UNEVEN + "+recompute"],
    [UNEVEN + "+recompute", "megatron_ts", "megatron_cz", UNEVEN + "+offload"],
], True, llama_kv=3)
for _name in ("gpt5", "llama5-kv1"):  # the uneven split inside head groups of Ulysses x ring
    CASES[f"uneven-usp2-{_name}-sublayer-causal"] = sublayer_case(_name, strategy=USP2)
    CASES[f"uneven-usp2-{_name}-packed-sublayer"] = sublayer_case(_name, packed=True, strategy=USP2)
CASES["uneven-usp2-gpt5-sublayer-bidir-recompute"] = sublayer_case("gpt5", False, True, strategy=USP2)
CASES["uneven-usp2-llama5-kv1-sublayer-offload"] = sublayer_case("llama5-kv1", offload=True, strategy=USP2)
CASES["uneven-usp2-gpt5-model"] = model_case("gpt5", [
    [USP2, "megatron_ts", UNEVEN + "+recompute", USP2 + "+tiled"],
    [USP2 + "+recompute", UNEVEN],
])
CASES["uneven-usp2-llama5-kv1-model"] = model_case("llama5-kv1", [[USP2, USP2 + "+recompute"],
                                                                   [UNEVEN, "metp", USP2 + "+recompute", USP2]])


def trace_case(strategy: str):
    """The operations this rank dispatches for one attention sub-layer of gpt5 under `strategy` (plain and
    recomputed) equal the trace made on meta tensors through a fake process group, one for one (the replay cost
    model prices that trace; the uneven all-to-all is one collective in both)."""
    def case(rank: int, p: int, group) -> None:
        cfg = CONFIGS["gpt5"]
        for option in (StrategyOption(strategy), StrategyOption(strategy, recompute=True)):
            traced = trace_sublayer(cfg, "attention", option, S, p, dtype="fp32", rank=rank)
            params, x = sublayer_inputs(cfg, "attention", S, p, 1, torch.float32, "cpu", rank)
            ran = warm_trace(lambda option=option, params=params, x=x:
                             run_sublayer_step(cfg, "attention", option, S, group, params, x))
            first = next((i for i, (a, b) in enumerate(zip(ran, traced)) if a != b), min(len(ran), len(traced)))
            assert ran == traced, (option.name, first, ran[first:first + 1], traced[first:first + 1])
    return case


CASES["uneven-ops-traced"] = trace_case(UNEVEN)
ONLY_AT = {name: (4,) for name in CASES}
"""Every case at p = 4, where none of the head counts divides."""
