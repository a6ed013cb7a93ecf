"""The single-device reference and the checks the distributed cases make against it, on every rank of one gloo
process group.

Shapes: gpt2-tiny (h 96, 12 heads, 4 layers, vocab 512) in fp32, b = 2, s = 48 (divisible by 2p for p = 1..4); the
whole-model cases whose plans name a strategy per sub-layer use 2 of its layers (MODEL_LAYERS); a LLaMA-shaped model
(`llama_config`) for RMSNorm, SwiGLU, rotary embeddings, grouped-query attention and an untied head. Every check
compares against the reference with torch.testing.assert_close and the bytes the collectives counted with the
analytic schedule.
"""

from __future__ import annotations

import functools
import weakref

import torch
from torch.testing import assert_close

from paradyse_lab.core.model_spec import PRESETS, ModelSpec
from paradyse_lab.core.strategies import StrategyOption, get_strategy
from paradyse_lab.costmodel.formulas import embedding_params
from paradyse_lab.costmodel.layer_checkpoint import checkpoints_layer
from paradyse_lab.costmodel.schedules import schedule
from paradyse_lab.runtime import ParallelGPT, gather_sequence, shard_sequence
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm.record import count_bytes
from paradyse_lab.runtime.model.parallel_gpt import STRATEGY_MODULES
from paradyse_lab.runtime.model.reference import ReferenceGPT, init_state_dict, reference_sublayer
from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES, shard_state_dict, shard_sublayer

B, S = 2, 48
STRATEGIES = tuple(STRATEGY_MODULES)
TOL = {"rtol": 1e-5, "atol": 1e-5}
"""fp32, tight: the parallel sums run in another order than the reference's."""


def config(causal: bool = True, heads: int | None = None, layers: int | None = None) -> ModelSpec:
    spec = PRESETS["gpt2-tiny"]
    return ModelSpec(vocab_size=spec.vocab_size, max_positions=64, hidden=spec.hidden,
                     heads=heads or spec.heads, layers=layers or spec.layers, causal=causal, name="runtime")


MODEL_LAYERS = 2
"""Layers of the whole-model cases whose plans give one name per sub-layer (attention, MLP of layer 0, then of
layer 1): four sub-layers hold the four strategies, so a plan still runs every strategy and switches at every
sub-layer, at half the sub-layers (and collectives) of gpt2-tiny's 4 layers."""


def random_state(cfg: ModelSpec, seed: int = 7) -> dict[str, torch.Tensor]:
    """GPT-2 init plus noise on every tensor (non-trivial norms and biases); identical on every rank."""
    sd = init_state_dict(cfg, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    return {k: v + 0.05 * torch.randn(v.shape, generator=gen) for k, v in sd.items()}


def predicted_bytes(cfg: ModelSpec, kind: str, option: str, p: int, seq: int = S) -> dict[str, int]:
    """Bytes by op the analytic schedule predicts one rank sends for one sub-layer (fwd + bwd) at length `seq`."""
    out: dict[str, int] = {}
    for call in schedule(cfg.with_dtype("fp32"), kind, StrategyOption.parse(option), seq, B, p).collectives:
        out[call.op] = out.get(call.op, 0) + call.sent_bytes
    return {k: v for k, v in out.items() if v}


@functools.cache
def reference(cfg: ModelSpec) -> tuple[dict[str, torch.Tensor], ReferenceGPT]:
    """(`random_state(cfg)`, the single-device reference with those weights), built once per rank and config and
    shared by the cases of the rank, which only read them (no case steps the reference or writes the state)."""
    sd = random_state(cfg)
    ref = ReferenceGPT(cfg)
    ref.load_state_dict(sd)
    return sd, ref


_REFERENCE_RUNS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Reference model -> its `reference_run` (computed once per model: `reference` shares the models)."""


def reference_run(ref: ReferenceGPT, ids: torch.Tensor | None, rank: int, group) -> tuple[torch.Tensor, ...]:
    """(ids, labels, logits, loss, {name: gradient}) of `ref` on the cases' seeded [B, S] batch, or on `ids` with
    its seeded labels (those of the first 5 positions of sequence 0 ignored), computed once per reference model,
    by rank 0 and sent to the others (every rank holds the same reference models in the same order: `reference`,
    or one built in the same case on every rank)."""
    if ref not in _REFERENCE_RUNS:
        _REFERENCE_RUNS[ref] = comm.broadcast_object(_run_reference(ref, ids) if rank == 0 else None, 0, group)
    assert ids is None or torch.equal(ids, _REFERENCE_RUNS[ref][0]), "the reference ran on other ids"
    return _REFERENCE_RUNS[ref]


def _run_reference(ref: ReferenceGPT, ids: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(11)
    drawn = torch.randint(0, ref.cfg.vocab_size, (B, S), generator=gen)
    ids = drawn if ids is None else ids
    labels = torch.randint(0, ref.cfg.vocab_size, (B, S), generator=gen)
    labels[0, :5] = -100
    ref.zero_grad()
    logits, loss = ref(ids, labels)
    loss.backward()
    grads = {n: grad_of(q).clone() for n, q in ref.named_parameters()}
    ref.zero_grad()
    return ids, labels, logits.detach(), loss.detach(), grads


def grad_of(q: torch.Tensor) -> torch.Tensor:
    """q's gradient; zeros for a parameter the forward does not use (LLaMA's empty biases, `wpe` [0, h])."""
    return q.grad if q.grad is not None else torch.zeros_like(q)


# --- one sub-layer ---------------------------------------------------------------------------------------

@functools.cache
def sublayer_reference(causal: bool, kind: str, layer: int, seq: int, seed: int, cu: tuple[int, ...] | None = None):
    """({name: parameter}, x, dy, y, dx, {name: parameter gradient}) of the single-device sub-layer `kind` of layer
    `layer` of `reference(config(causal))` on seeded x and dy [B, seq, h] (`cu`: the packed documents' boundaries,
    block-diagonal mask), computed once per rank and shared by the one-sub-layer cases, which only read them."""
    cfg = config(causal)
    prefix = f"layers.{layer}." + ("attn." if kind == "attention" else "mlp.")
    full = {n.rpartition(".")[2]: v for n, v in reference(cfg)[0].items() if n.startswith(prefix)}
    gen = torch.Generator().manual_seed(seed)
    x, dy = torch.randn(B, seq, cfg.hidden, generator=gen), torch.randn(B, seq, cfg.hidden, generator=gen)
    xr = x.clone().requires_grad_()
    pr = {n: v.clone().requires_grad_() for n, v in full.items()}
    yr = reference_sublayer(xr, pr, kind, cfg, *(() if cu is None else (torch.tensor(cu, dtype=torch.int32),)))
    yr.backward(dy)
    return full, x, dy, yr.detach(), xr.grad, {n: pr[n].grad for n in PARAM_NAMES}


TILE = 5
"""Positions per chunk of the tiled MLP in these cases: uneven chunks of the 24 (p = 2) ... 48 (p = 1) positions
of a rank's b = 2 sequences."""


# --- the whole model -------------------------------------------------------------------------------------

def _check_model(model: ParallelGPT, ref: ReferenceGPT, plans, rank: int, p: int, group, loss_tile: int = 0,
                 mlp_tile: int = 0, hf: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
    """Run each plan on `model` (one after another, as training steps) and compare with `ref`; `loss_tile` > 0:
    with the tiled loss (runtime/model/tiled_loss.py), which returns no logits; `mlp_tile`: the positions per chunk of
    `+tiled` MLPs (0: ALST's rule). The bytes each `+offload` sub-layer moved to host memory and back are the
    cost model's (`check_offloaded`). `hf`: (ids, transformers' logits on them): the steps run on those ids and
    each plan's logits also equal transformers' (fp32, 1e-4)."""
    cfg = model.cfg
    ids, labels, logits_r, loss_r, full_grads = reference_run(ref, hf[0] if hf else None, rank, group)
    ref_grads = shard_state_dict(full_grads, rank, p, model.vocab_parallel)
    emb_bytes = 2 * embedding_params(cfg.with_dtype("fp32")) * 4 * (p - 1) // p
    for plan in plans:
        model.zero_grad()
        before = {n: q.detach().clone() for n, q in model.named_parameters()}
        with count_bytes() as counter:
            logits, loss = model(shard_sequence(ids, 1, group), plan, shard_sequence(labels, 1, group),
                                 loss_tile=loss_tile, mlp_tile=mlp_tile)
            for n, q in model.named_parameters():
                assert torch.equal(q.detach(), before[n]), f"{n} changed during the forward pass"
            loss.backward()
        if loss_tile or model.vocab_parallel:
            assert logits is None
            assert not hf, "Hugging Face logits to compare, but this model returns none"
        else:
            gathered = gather_sequence(logits.detach(), 1, group)
            assert_close(gathered, logits_r, **TOL)
            if hf:
                assert_close(gathered, hf[1], rtol=1e-4, atol=1e-4, msg=lambda m, plan=plan: f"{plan}: {m}")
        assert_close(loss.detach(), loss_r, **TOL)
        for n, q in model.named_parameters():
            assert_close(grad_of(q), ref_grads[n], **TOL, msg=lambda m, n=n, plan=plan: f"{plan}: grad {n}: {m}")
        # every byte belongs to a sub-layer, the embedding or the loss: switching moves nothing
        assert counter.total("") == {}, counter.total("")
        per_sublayer = len(plan) == 2 * cfg.layers
        for index in range(cfg.layers):
            for j, kind in enumerate(("attention", "mlp")):
                option = plan[2 * index + j] if per_sublayer else plan[index]
                got = counter.total(f"layers.{index}.{kind}")
                assert got == predicted_bytes(cfg, kind, option, p), (plan, index, kind, got)
        if model.vocab_parallel:  # the sharded embedding and head: the cost model's collectives, byte for byte
            got = {op: counter.total("embedding").get(op, 0) + counter.total("head").get(op, 0)
                   for op in ("all_gather", "reduce_scatter", "all_reduce")}
            assert {k: v for k, v in got.items() if v} == vocab_predicted_bytes(cfg, p, loss_tile), (plan, got)
        else:
            assert counter.total("embedding") == ({"all_reduce": emb_bytes} if p > 1 else {})
        check_offloaded(model.offload_stats, cfg, plan, p, mlp_tile)


def vocab_predicted_bytes(cfg: ModelSpec, p: int, loss_tile: int) -> dict[str, int]:
    """Bytes by op the cost model predicts one rank sends for the vocabulary-parallel embedding, head and loss
    (paradyse_lab/costmodel/head_loss.py) on B x S / p tokens, `loss_tile` at a time (0: all)."""
    from paradyse_lab.costmodel.head_loss import vocab_parallel_collectives

    tokens = B * S // p
    out: dict[str, int] = {}
    for call in vocab_parallel_collectives(cfg.with_dtype("fp32"), p, tokens, min(loss_tile or tokens, tokens)):
        out[call.op] = out.get(call.op, 0) + call.sent_bytes
    return {k: v for k, v in out.items() if v}


def check_offloaded(stats, cfg: ModelSpec, plan, p: int, mlp_tile: int = 0) -> None:
    """Every `+offload` sub-layer of `plan` moved to host memory and back exactly the schedule's host bytes (a block
    plan's layer under `+recompute+offload`: its input alone, the checkpointed layer's), the others nothing; each
    was brought back during the backward of the next sub-layer when that one is offloaded too and holds at least
    as many bytes (the one extra set the cost model counts), else during its own; a set the
    cost model prices as prefetched (`Schedule.host_prefetched`: its input alone) was, wherever the next sub-layer
    offloads too."""
    per_sublayer = len(plan) == 2 * cfg.layers
    want, priced_hidden = {}, {}
    span = {}  # tag -> (first, last) sub-layer position it covers
    for index in range(cfg.layers):
        if not per_sublayer and checkpoints_layer(StrategyOption.parse(plan[index]), ("attention", "mlp")):
            # a checkpointed layer (costmodel/layer_checkpoint.py): its input alone, the attention's offloaded set
            host = schedule(cfg.with_dtype("fp32"), "attention", StrategyOption.parse(plan[index]), S, B, p)
            want[f"layers.{index}"], priced_hidden[f"layers.{index}"] = host.host_bytes, host.host_prefetched
            span[f"layers.{index}"] = (2 * index, 2 * index + 1)
            continue
        for j, kind in enumerate(("attention", "mlp")):
            option = StrategyOption.parse(plan[2 * index + j] if per_sublayer else plan[index])
            host = schedule(cfg.with_dtype("fp32"), kind, option, S, B, p, mlp_tile=mlp_tile or None)
            assert bool(host.host_bytes) == option.offload, (option, host)
            if option.offload:
                want[f"layers.{index}.{kind}"] = host.host_bytes
                priced_hidden[f"layers.{index}.{kind}"] = host.host_prefetched
                span[f"layers.{index}.{kind}"] = (2 * index + j, 2 * index + j)
    if not want:
        assert stats is None, stats
        return
    assert stats.to_host == stats.to_device == want, (plan, stats, want)
    offloaded = list(want)
    back = {tag: during for direction, tag, during in stats.copies if direction == "to_device"}

    def adjacent(tag, later):
        return span[later][0] == span[tag][1] + 1

    def during(i, tag):  # prefetched by the next sub-layer when it is adjacent and holds at least as many bytes
        later = offloaded[i + 1] if i + 1 < len(offloaded) else None
        early = later and adjacent(tag, later) and want[tag] <= want[later]
        return later if early else tag

    assert back == {tag: during(i, tag) for i, tag in enumerate(offloaded)}, (back, offloaded)
    for i, tag in enumerate(offloaded[:-1]):  # the cost model prices a copy back hidden only where it is prefetched
        if priced_hidden[tag] and adjacent(tag, offloaded[i + 1]):
            assert back[tag] == offloaded[i + 1], (tag, back)


def reference_and_model(causal: bool, group, layers: int | None = None):
    """(config, full state dict, the single-device reference, the model sharded over `group`), same weights;
    `layers` of gpt2-tiny (None: all 4)."""
    cfg = config(causal, layers=layers)
    sd, ref = reference(cfg)
    return cfg, sd, ref, ParallelGPT(cfg, group, state_dict=sd)


# --- LLaMA-shaped layers: RMSNorm, SwiGLU, rotary embeddings, grouped-query attention, untied head ---------

def llama_config(kv_heads: int) -> ModelSpec:
    """h 144, 12 heads of d = 12 (K/V width kv_heads * 12 splits over p = 1..4), f 96, 2 layers."""
    return ModelSpec(vocab_size=64, max_positions=S, hidden=144, heads=12, layers=2, ffn_hidden=96, norm_eps=1e-6,
                     kv_heads=kv_heads, norm="rmsnorm", ffn_kind="swiglu", bias=False, rope_theta=1000.0,
                     tied=False, name="runtime")


def feasible(cfg: ModelSpec, p: int) -> list[str]:
    """The strategies the catalog's GQA rule allows for `cfg` on p ranks (paradyse_lab/core/strategies.py)."""
    spec = cfg.with_dtype("fp32")
    return [name for name in STRATEGIES if get_strategy(name).violation(spec, p, S) is None]


def llama_plans(names: list[str]) -> list[list[str]]:
    """Two mixed plans of a 2-layer model over `names` (up to 4), with recompute, in which every name runs
    both an attention and an MLP sub-layer: one name per layer, then one per sub-layer."""
    n = len(names)
    per_layer = [names[0], names[1 % n] + "+recompute"]
    per_sublayer = [names[2 % n] + "+recompute", names[3 % n], names[3 % n], names[2 % n] + "+recompute"]
    return [per_layer, per_sublayer]


def check_sharded_attention(y, xl, params, reference_out, rank: int, p: int, group, cu) -> None:
    """An attention sub-layer's output, input gradient and every parameter's gradient on this rank equal the
    reference's (`reference_out`: its output, input gradient and full parameter gradients), sharded as the rank
    holds them (`cu`: a pack's document offsets, or None)."""
    yr, dx, grads = reference_out
    assert_close(y, shard_sequence(yr, 1, group, cu), **TOL)
    assert_close(xl.grad, shard_sequence(dx, 1, group, cu), **TOL)
    ref = shard_sublayer(grads, "attention", rank, p)
    for name, prm in zip(PARAM_NAMES, params):
        assert_close(prm.grad, ref[name], **TOL, msg=lambda m, name=name: f"grad of {name}: {m}")
