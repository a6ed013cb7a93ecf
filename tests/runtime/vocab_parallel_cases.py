"""The embedding and head sharded by vocabulary rows, against the single-device reference; what the sharded
loss keeps for the backward and its FLOPs against the cost model.
"""

from __future__ import annotations

import dataclasses

import torch
from reference_checks import (
    MODEL_LAYERS,
    TOL,
    B,
    S,
    _check_model,
    config,
    feasible,
    llama_config,
    llama_plans,
    reference,
)
from torch.testing import assert_close

from paradyse_lab.app.measure.profile_memory import KeptRecorder
from paradyse_lab.runtime import ParallelGPT, gather_sequence, shard_sequence


def vocab_parallel_case(llama: bool, loss_tile: int, gpt2_plan: int = 0, tied: bool = False):
    """The embedding and head sharded by vocabulary rows (runtime/model/vocab_parallel.py): GPT-2's tied table of 512
    rows or LLaMA's untied 64 (GQA, RMSNorm, SwiGLU, rotary), neither divisible by p = 3 (the last rank's shard is
    padded), under mixed plans of every feasible strategy with recompute, `loss_tile` tokens per rank at a time
    (0: all): loss and every gradient equal the reference's, every sub-layer's bytes the schedules' and the
    embedding's and head's the cost model's (`_check_model`); the logits (no labels) equal the reference's; the
    shards gather back to the full state dict; the rank holds the cost model's count of embedding, head, position
    and final-norm parameters. `tied`: the LLaMA shares its embedding with the head (Llama-3.2's
    tie_word_embeddings)."""
    def case(rank: int, p: int, group) -> None:
        from paradyse_lab.costmodel.head_loss import vocab_state_params

        cfg = dataclasses.replace(llama_config(2), tied=tied) if llama else config(True, layers=MODEL_LAYERS)
        sd, ref = reference(cfg)
        model = ParallelGPT(cfg, group, state_dict=sd, vocab_parallel=True)
        assert model.wte.shape[0] == -(-cfg.vocab_size // p)
        outside = sum(q.numel() for n, q in model.named_parameters() if not n.startswith("layers."))
        assert outside == vocab_state_params(cfg.with_dtype("fp32"), p), outside
        full = model.full_state_dict()
        assert set(full) == set(sd) and all(torch.equal(full[k], sd[k]) for k in sd)
        plans = llama_plans(feasible(cfg, p)) if llama else [[  # every strategy, two with recompute, per sub-layer
            ["megatron_ts", "megatron_cz+recompute", "ulysses_z", "metp+recompute"],
            ["metp", "ulysses_z+recompute", "megatron_cz", "megatron_ts+recompute"]][gpt2_plan]]
        _check_model(model, ref, plans, rank, p, group, loss_tile)
        ids = torch.randint(0, cfg.vocab_size, (B, S), generator=torch.Generator().manual_seed(12))
        with torch.no_grad():
            got = gather_sequence(model(shard_sequence(ids, 1, group), plans[-1]), 1, group)  # [b, s, V]
            assert_close(got, ref(ids), **TOL)
    return case


def vocab_parallel_kept_case(rank: int, p: int, group) -> None:
    """What the vocabulary-parallel loss keeps for the backward is the cost model's count byte for byte
    (paradyse_lab/costmodel/head_loss.py `vocab_loss_kept_bytes`: the norm's input and the fp32 log-sum-exp
    of every gathered row), in bf16, on a vocabulary that p = 3 does not divide; the FLOPs of its forward and
    backward are the cost model's four head GEMMs (`vocab_head_flops`)."""
    from torch.utils.flop_counter import FlopCounterMode

    from paradyse_lab.costmodel.head_loss import vocab_head_flops, vocab_loss_kept_bytes
    from paradyse_lab.runtime.model.vocab_parallel import vocab_parallel_loss, vocab_shard_rows

    cfg = llama_config(2)
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(1, 10, cfg.hidden, generator=gen).bfloat16().requires_grad_()
    lnf_w, lnf_b = torch.ones(cfg.hidden, dtype=torch.bfloat16), torch.zeros(0, dtype=torch.bfloat16)
    weight = torch.randn(vocab_shard_rows(cfg.vocab_size, p), cfg.hidden, generator=gen).bfloat16()
    labels = torch.randint(0, cfg.vocab_size, (1, 10), generator=gen)
    with FlopCounterMode(display=False) as flops:
        with KeptRecorder(exclude=(lnf_w, lnf_b, weight, labels)) as rec:
            loss = vocab_parallel_loss(x, lnf_w, lnf_b, weight, labels, cfg.norm_eps, 4, group, cfg.vocab_size)
        loss.backward()
    assert rec.nbytes == vocab_loss_kept_bytes(cfg.with_dtype("bf16"), p, 10), rec.nbytes
    assert flops.get_total_flops() == vocab_head_flops(cfg.with_dtype("bf16"), p, 10), flops.get_total_flops()


CASES = {}
ONLY_AT: dict[str, tuple[int, ...]] = {}

for _llama, _tile, _plan in ((False, 11, 0), (False, 0, 1), (True, 7, 0)):
    # GPT-2, 11 tokens a tile: uneven tiles at every p (96, 48, 32 and 24 tokens a rank: 9, 5, 3 and 3 tiles, the
    # last shorter); each tile's gathers and reductions are collectives, so a tile of 5 (20 down to 5 tiles) cost
    # twice the collectives for the same claim
    CASES[f"vocab-parallel-{'llama' if _llama else 'gpt2'}-tile{_tile}"] = vocab_parallel_case(_llama, _tile, _plan)
ONLY_AT["vocab-parallel-gpt2-tile0"] = (3,)  # one tile of all tokens, where p does not divide V (tile 11: every p)
ONLY_AT["vocab-parallel-llama-tile7"] = (1, 2)  # p = 3: the tied LLaMA below; p = 4: the rows split evenly over
# four ranks in vocab-parallel-gpt2-tile11 (every p) and gpt2-dcp-reshard-vocab-4-to-2-and-replicated-2
CASES["vocab-parallel-llama-tied-tile11"] = vocab_parallel_case(True, 11, tied=True)  # 32 tokens a rank: 2 tiles
# of 11 and a last one of 10 (each tile's gathers and reductions are collectives: tiles of 5 made 7 tiles and 280
# collectives a rank)
ONLY_AT["vocab-parallel-llama-tied-tile11"] = (3,)  # the tied LLaMA where p does not divide V (untied: every p)
CASES["vocab-parallel-kept"] = vocab_parallel_kept_case
ONLY_AT["vocab-parallel-kept"] = (3,)  # counts in p, checked where p does not divide V (FlopCounterMode: 6 s a world)
