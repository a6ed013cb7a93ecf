"""Packed documents: attention confined to each document, under every strategy, one sub-layer and the whole
model against the single-device reference with the block-diagonal mask.
"""

from __future__ import annotations

import torch
from reference_checks import (
    STRATEGIES,
    TOL,
    B,
    check_sharded_attention,
    config,
    feasible,
    grad_of,
    llama_config,
    predicted_bytes,
    reference,
    reference_and_model,
    sublayer_reference,
)
from torch.testing import assert_close

from paradyse_lab.runtime import ParallelGPT, gather_sequence, shard_sequence
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm.record import count_bytes
from paradyse_lab.runtime.model.parallel_gpt import STRATEGY_MODULES
from paradyse_lab.runtime.model.reference import ReferenceGPT
from paradyse_lab.runtime.model.sublayer import Ctx, run_sublayer
from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES, shard_state_dict, shard_sublayer

PACKS = ((1, 13, 5, 1, 27), (3, 1, 9, 30))
"""Documents of the packed cases: lengths not multiples of 2p, single-token documents (padded to 2p, so
most ranks hold only their padding), documents longer than a rank's share of the pack, and for p > 1 every
document padded to 2p by its own padding segment (pack 1: 47 tokens -> 60 at p = 2, 66 at p = 3, 72 at p = 4)."""


def packed_sublayer_case(strategy: str, causal: bool, recompute: bool):
    """One attention sub-layer over a pack (47 tokens at p = 1, else 48) equals the reference with the
    block-diagonal mask: output, input gradient, every parameter's gradient; the bytes sent are the
    unpacked schedule's (the documents of received K/V are derived locally, nothing more travels)."""
    def case(rank: int, p: int, group) -> None:
        from paradyse_lab.runtime.model.packed import cu_seqlens, pack_sequence

        pack = pack_sequence(PACKS[0], p)
        seq, cu = pack.padded_len, cu_seqlens(pack)
        assert seq == {1: 47, 2: 60, 3: 66, 4: 72}[p]
        cfg = config(causal)
        full, x, dy, yr, dx, grads = sublayer_reference(causal, "attention", 2, seq, 5, tuple(cu.tolist()))
        x = x.clone()  # the case's own input (shared: the reference's)

        params = [v.clone().requires_grad_() for v in (shard_sublayer(full, "attention", rank, p)[n]
                                                        for n in PARAM_NAMES)]
        xl = shard_sequence(x, 1, group, cu).requires_grad_()
        ctx = Ctx(group=group, p=p, rank=rank, kind="attention", heads=cfg.heads, causal=causal, seq_len=seq,
                  eps=cfg.norm_eps, tag="case", cu_seqlens=cu_seqlens(pack))
        with count_bytes() as counter:
            y = run_sublayer(STRATEGY_MODULES[strategy].ATTENTION, ctx, recompute, xl, params)
            y.backward(shard_sequence(dy, 1, group, cu))
        check_sharded_attention(y, xl, params, (yr, dx, grads), rank, p, group, cu)
        option = strategy + ("+recompute" if recompute else "")
        assert counter.total() == predicted_bytes(cfg, "attention", option, p, seq)
    return case


def _packed_reference(ref: ReferenceGPT, ids: torch.Tensor, labels: torch.Tensor, cu: torch.Tensor):
    """(logits, loss, {name: gradient}) of the single-device reference on a pack (block-diagonal mask)."""
    ref.zero_grad()
    logits, loss = ref(ids, labels, cu)
    loss.backward()
    return logits.detach(), loss.detach(), {n: grad_of(q) for n, q in ref.named_parameters()}  # rope: wpe empty


def packed_model_case(plans, causal: bool, first_pack: int = 0, llama_kv: int = 0):
    """The whole model over packs, one plan per step (mixed strategies, recompute), against the
    reference with the block-diagonal mask and per-document positions: logits, loss, every gradient.
    `llama_kv`: a LLaMA-shaped model with that many K/V heads (RoPE by position within each document, GQA),
    each None of `plans` a plan cycling through the strategies the GQA rule allows at p."""
    def case(rank: int, p: int, group) -> None:
        from paradyse_lab.runtime.model.packed import cu_seqlens, pack_labels, pack_sequence

        if llama_kv:
            cfg = llama_config(llama_kv)
            sd, ref = reference(cfg)
            model = ParallelGPT(cfg, group, state_dict=sd)
            names = feasible(cfg, p)
            runs = [plan or [names[(i + j) % len(names)] + ("+recompute" if (i + j) % 2 else "")
                             for i in range(cfg.layers)] for j, plan in enumerate(plans)]
        else:
            cfg, _, ref, model = reference_and_model(causal, group)
            runs = plans
        for step, plan in enumerate(runs):
            pack = pack_sequence(PACKS[(first_pack + step) % len(PACKS)], p)
            gen = torch.Generator().manual_seed(20 + step)
            ids = torch.randint(0, cfg.vocab_size, (B, pack.padded_len), generator=gen)
            labels = pack_labels(pack, ids)
            logits_r, loss_r, full_grads = comm.broadcast_object(  # rank 0's reference: the same on every rank
                _packed_reference(ref, ids, labels, cu_seqlens(pack)) if rank == 0 else None, 0, group)
            ref_grads = shard_state_dict(full_grads, rank, p)
            model.zero_grad()
            cu = cu_seqlens(pack)
            logits, loss = model(shard_sequence(ids, 1, group, cu), plan, shard_sequence(labels, 1, group, cu),
                                 cu_seqlens=cu)
            loss.backward()
            assert_close(gather_sequence(logits.detach(), 1, group, cu), logits_r, **TOL)
            assert_close(loss.detach(), loss_r, **TOL)
            for n, q in ((n, q) for n, q in model.named_parameters() if q.numel()):
                assert_close(q.grad, ref_grads[n], **TOL, msg=lambda m, n=n, plan=plan: f"{plan}: grad {n}: {m}")
    return case


CASES = {}
ONLY_AT: dict[str, tuple[int, ...]] = {}

PACKED_SUBLAYER_AT = {True: (4,), False: (2,)}
"""World sizes of the packed one-sub-layer cases, causal and bidirectional: the only check that a strategy sends
over a pack the bytes of the unpacked schedule at the padded length, for every strategy at p = 4 (causal) and p = 2
(bidirectional). p = 1 sends nothing, and packed-model-* check outputs and gradients over packs under every
strategy (packed-model-mixed-causal at p = 1, 2 and 3, -bidir at p = 1 and 3; documents padded to 2p = 6 at
p = 3; at p = 4 the packed 2-D and uneven-head models: usp-packed-llama-kv2-gqa, tpcp-packed-llama-kv4-gqa,
uneven-packed-llama12-kv3-model, headchunk-llama-kv2-packed-model)."""

for _strategy in STRATEGIES:  # recomputation is covered by the mixed plans below
    for _causal in (True, False):
        CASES[f"packed-sublayer-{_strategy}-{'causal' if _causal else 'bidir'}"] = packed_sublayer_case(
            _strategy, _causal, False)
        ONLY_AT[f"packed-sublayer-{_strategy}-{'causal' if _causal else 'bidir'}"] = PACKED_SUBLAYER_AT[_causal]
CASES["packed-model-mixed-causal"] = packed_model_case([  # every strategy with and without recomputation
    ["megatron_ts", "megatron_cz+recompute", "ulysses_z", "metp+recompute"],
    ["metp", "ulysses_z+recompute", "megatron_cz", "megatron_ts+recompute"],
], True)
CASES["packed-model-mixed-bidir"] = packed_model_case([
    ["ulysses_z+recompute", "metp", "megatron_ts", "megatron_cz+recompute"]], False, first_pack=1)
ONLY_AT["packed-model-mixed-causal"] = (1, 2, 3)  # p = 4: every strategy over a pack against the reference in
# packed-sublayer-*-causal (outputs, every gradient, bytes), whole packed models in the cases named above
ONLY_AT["packed-model-mixed-bidir"] = (1, 3)  # p = 2: every strategy's bidirectional attention over a pack
# against the reference in packed-sublayer-*-bidir (outputs, every gradient, bytes); p = 4: a bidirectional pack
# under the 2-D strategies in usp-2-packed-sublayer-bidir and tpcp-2-packed-sublayer-bidir
CASES["packed-llama-gqa-causal"] = packed_model_case([None, None], True, llama_kv=2)
ONLY_AT["packed-llama-gqa-causal"] = (1, 2, 3)  # p = 4: packed LLaMA models with per-document RoPE in
# usp-packed-llama-kv2-gqa (the same 2 K/V heads), tpcp-packed-llama-kv4-gqa and headchunk-llama-kv2-packed-model
