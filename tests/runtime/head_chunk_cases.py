"""Distributed cases of head-chunked attention (`+headchunk`, runtime/strategies/head_chunked.py), run in the
harness's one world per size (runtime_cases.py adds them, at p = 2 and 4):
- one attention sub-layer of gpt2-tiny (12 heads: 6 chunks at p = 2, 3 at p = 4) and of a LLaMA-shaped layer
  with 2 K/V heads (grouped-query attention, RoPE), causal and bidirectional, with and without recomputation,
  and over a pack of documents: output, input gradient and every parameter gradient against the single-device
  reference; the bytes each collective sent and the bytes kept for the backward equal the cost model's
  (paradyse_lab/costmodel/head_chunks.py);
- the whole LLaMA-shaped model over packed documents under plans that mix `ulysses_z+headchunk` (recomputed,
  offloaded) with the other strategies: logits, loss and every gradient against the reference.
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch
from runtime_cases import (
    PACKS,
    TOL,
    B,
    _packed_reference,
    grad_of,
    llama_config,
    predicted_bytes,
    reference,
    sublayer_reference,
)
from torch.testing import assert_close

from paradyse_lab.app.measure.profile_memory import KeptRecorder
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.schedules import schedule
from paradyse_lab.runtime import ParallelGPT, gather_sequence, shard_sequence
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm.record import count_bytes
from paradyse_lab.runtime.model.parallel_gpt import run_option
from paradyse_lab.runtime.model.reference import reference_sublayer
from paradyse_lab.runtime.model.sublayer import make_ctx
from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES, shard_state_dict, shard_sublayer
from paradyse_lab.runtime.strategies.offload import Offloader

AT = (2, 4)
"""World sizes: p = 2 (6 chunks of gpt2-tiny's 12 heads) and p = 4 (3 chunks; with 2 K/V heads, each read by the
query heads of two ranks)."""


def _llama_sublayer_reference(kv_heads: int, causal: bool, seq: int, cu: tuple[int, ...] | None):
    """({name: parameter}, x, dy, y, dx, {name: gradient}) of layer 1's attention of `llama_config(kv_heads)`
    (causal or not) on seeded x, dy [B, seq, h]; `cu`: the packed documents' boundaries."""
    cfg = dataclasses.replace(llama_config(kv_heads), causal=causal)
    full = {n.rpartition(".")[2]: v for n, v in reference(cfg)[0].items() if n.startswith("layers.1.attn.")}
    gen = torch.Generator().manual_seed(9)
    x, dy = torch.randn(B, seq, cfg.hidden, generator=gen), torch.randn(B, seq, cfg.hidden, generator=gen)
    xr = x.clone().requires_grad_()
    pr = {n: v.clone().requires_grad_() for n, v in full.items()}
    yr = reference_sublayer(xr, pr, "attention", cfg, *(() if cu is None else (torch.tensor(cu, dtype=torch.int32),)))
    yr.backward(dy)
    return cfg, full, x, dy, yr.detach(), xr.grad, {n: grad_of(pr[n]) for n in PARAM_NAMES}


def sublayer_case(kv_heads: int, causal: bool, recompute: bool, packed: bool = False, offload: bool = False):
    """One attention sub-layer under `ulysses_z+headchunk` against the reference: output, gradients, bytes sent,
    bytes kept (and moved to host memory with `offload`). `kv_heads` 0: gpt2-tiny; else the LLaMA-shaped layer."""
    option = StrategyOption("ulysses_z", recompute=recompute, headchunk=True, offload=offload)

    def case(rank: int, p: int, group) -> None:
        from paradyse_lab.runtime.model.packed import cu_seqlens, local_documents, pack_sequence

        pack = pack_sequence(PACKS[0], p) if packed else None
        cu = cu_seqlens(pack) if packed else None
        seq = pack.padded_len if packed else 48
        cu_key = tuple(cu.tolist()) if packed else None
        if kv_heads:
            cfg, full, x, dy, yr, dx, grads = _llama_sublayer_reference(kv_heads, causal, seq, cu_key)
        else:
            from runtime_cases import config

            cfg = config(causal)
            full, x, dy, yr, dx, grads = sublayer_reference(causal, "attention", 1, seq, 3, cu_key)
        params = [v.clone().requires_grad_() for v in (shard_sublayer(full, "attention", rank, p)[n]
                                                        for n in PARAM_NAMES)]
        xl = shard_sequence(x.clone(), 1, group, cu).requires_grad_()
        positions = all_positions = doc_ids = None
        if packed and cfg.rope_theta:
            from paradyse_lab.runtime.model.layout import gathered_positions
            from paradyse_lab.runtime.model.packed import document_of

            doc_ids, positions = local_documents(cu, seq, p, rank)
            all_positions = document_of(cu, gathered_positions(seq, p, cu))[1]
        ctx = make_ctx(cfg, group, "attention", seq, "case", xl.device, positions, all_positions, doc_ids, cu)
        offloader = Offloader(xl.device)
        with count_bytes() as counter:
            with KeptRecorder(exclude=params) as kept:
                with offloader.sublayer("case", params) if offload else contextlib.nullcontext():
                    y = run_option(option, ctx, xl, params, 5)
            y.backward(shard_sequence(dy, 1, group, cu))
        assert_close(y, shard_sequence(yr, 1, group, cu), **TOL)
        assert_close(xl.grad, shard_sequence(dx, 1, group, cu), **TOL)
        ref = shard_sublayer(grads, "attention", rank, p)
        for name, prm in zip(PARAM_NAMES, params):
            assert_close(prm.grad, ref[name], **TOL, msg=lambda m, name=name: f"grad of {name}: {m}")
        want_sent = predicted_bytes(cfg, "attention", option.name, p, seq)
        assert counter.total() == want_sent, (counter.total(), want_sent)
        want = schedule(cfg.model_spec("fp32"), "attention", option, seq, B, p)
        assert kept.nbytes == want.kept_bytes, (kept.nbytes, want.kept_bytes, list(kept.kept.values()))
        if offload:
            assert offloader.stats.to_host["case"] == offloader.stats.to_device["case"] == want.host_bytes
    return case


def model_case(kv_heads: int, plans):
    """The LLaMA-shaped model (2 layers, `kv_heads` K/V heads) over packed documents, one plan per step, against
    the reference with the block-diagonal mask and per-document positions: logits, loss, every gradient."""
    def case(rank: int, p: int, group) -> None:
        from paradyse_lab.runtime.model.packed import cu_seqlens, pack_labels, pack_sequence

        cfg = llama_config(kv_heads)
        sd, ref = reference(cfg)
        model = ParallelGPT(cfg, group, state_dict=sd)
        for step, plan in enumerate(plans):
            pack = pack_sequence(PACKS[step % len(PACKS)], p)
            gen = torch.Generator().manual_seed(40 + step)
            ids = torch.randint(0, cfg.vocab_size, (B, pack.padded_len), generator=gen)
            labels = pack_labels(pack, ids)
            cu = cu_seqlens(pack)
            logits_r, loss_r, full_grads = comm.broadcast_object(
                _packed_reference(ref, ids, labels, cu) if rank == 0 else None, 0, group)
            ref_grads = shard_state_dict(full_grads, rank, p)
            model.zero_grad()
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
for _kv, _causal, _recompute in ((0, True, False), (0, False, True), (2, True, False), (2, True, True),
                                 (2, False, False)):
    _name = (f"headchunk-{'gpt2' if not _kv else f'llama-kv{_kv}'}-{'causal' if _causal else 'bidir'}"
             + ("-recompute" if _recompute else ""))
    CASES[_name] = sublayer_case(_kv, _causal, _recompute)
CASES["headchunk-gpt2-packed-causal"] = sublayer_case(0, True, False, packed=True)
CASES["headchunk-llama-kv2-packed-recompute-offload"] = sublayer_case(2, True, True, packed=True, offload=True)
CASES["headchunk-llama-kv2-packed-model"] = model_case(2, [
    ["ulysses_z+headchunk", "megatron_cz+recompute"],  # one option per layer
    ["ulysses_z+recompute+headchunk", "megatron_cz", "ulysses_z+headchunk+offload", "ulysses_z+tiled"],
])
for _name in CASES:
    ONLY_AT[_name] = AT
