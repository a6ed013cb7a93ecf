"""Distributed cases of head-chunked attention (`+headchunk`, runtime/strategies/head_chunked.py), run in the
harness's one world per size (runtime_cases.py adds them, at p = 2 and 4; the GPT-2 ones at p = 2, the whole
LLaMA at p = 4):
- one attention sub-layer of gpt2-tiny (12 heads: 6 chunks at p = 2) and of a LLaMA-shaped layer
  with 2 K/V heads (grouped-query attention, RoPE), causal and bidirectional, with and without recomputation,
  and over a pack of documents: output, input gradient and every parameter gradient against the single-device
  reference; the bytes each collective sent and the bytes kept for the backward equal the cost model's
  (paradyse_lab/costmodel/head_chunks.py);
- the whole LLaMA-shaped model over packed documents under plans that mix `ulysses_z+headchunk` (recomputed,
  offloaded, in checkpointed layers) with the other strategies: logits, loss and every gradient against the
  reference (runtime_cases.py `packed_model_case`).
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch
from runtime_cases import (
    PACKS,
    TILE,
    B,
    check_sharded_attention,
    grad_of,
    llama_config,
    model_case,
    packed_model_case,
    predicted_bytes,
    reference,
    sublayer_reference,
)

from paradyse_lab.app.measure.profile_memory import KeptRecorder
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.schedules import schedule
from paradyse_lab.runtime import shard_sequence
from paradyse_lab.runtime.comm.record import count_bytes
from paradyse_lab.runtime.model.parallel_gpt import run_option
from paradyse_lab.runtime.model.reference import reference_sublayer
from paradyse_lab.runtime.model.sublayer import make_ctx
from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES, shard_sublayer
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
        check_sharded_attention(y, xl, params, (yr, dx, grads), rank, p, group, cu)
        want_sent = predicted_bytes(cfg, "attention", option.name, p, seq)
        assert counter.total() == want_sent, (counter.total(), want_sent)
        want = schedule(cfg.with_dtype("fp32"), "attention", option, seq, B, p)
        assert kept.nbytes == want.kept_bytes, (kept.nbytes, want.kept_bytes, list(kept.kept.values()))
        if offload:
            assert offloader.stats.to_host["case"] == offloader.stats.to_device["case"] == want.host_bytes
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
CASES["headchunk-llama-kv2-packed-model"] = packed_model_case([
    ["ulysses_z+headchunk", "megatron_cz+recompute"],  # one option per layer
    ["ulysses_z+recompute+headchunk", "megatron_cz", "ulysses_z+headchunk+offload", "ulysses_z+tiled"],
    ["ulysses_z+recompute+tiled+headchunk+offload", "ulysses_z+recompute+headchunk+offload"],  # checkpointed layers
], True, llama_kv=2)
# its bytes sent, moved to host memory and prefetched in checkpointed layers (`check_offloaded`)
CASES["headchunk-gpt2-checkpointed-layers"] = model_case([
    ["ulysses_z+recompute+headchunk+offload", "ulysses_z+recompute+tiled+headchunk+offload"],
], mlp_tile=TILE)
for _name in CASES:
    ONLY_AT[_name] = AT if "llama" in _name else (2,)  # GPT-2's 12 heads as 6 chunks at p = 2; at p = 4 the chunk
    # loop runs 3 times over the same code, and the LLaMA cases check it there (with K/V heads shared across ranks)
ONLY_AT["headchunk-llama-kv2-packed-model"] = (4,)  # the whole packed LLaMA where its 2 K/V heads are shared by
# four ranks; at p = 2 the same sub-layers in headchunk-llama-kv2-* (packed, recomputed, offloaded) and a whole
# head-chunked model in headchunk-gpt2-checkpointed-layers
