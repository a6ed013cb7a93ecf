"""Cases run on every rank of one gloo process group (dist_harness.py); test_distributed.py runs them.

Run: `python -m pytest -q tests/runtime`. Shapes: gpt2-tiny (h 96, 12 heads, 4 layers, vocab 512) in fp32,
b = 2, s = 48 (divisible by 2p for p = 1..4); the whole-model cases whose plans name a strategy per sub-layer
use 2 of its layers (MODEL_LAYERS). Every case compares against the single-device reference
with torch.testing.assert_close and compares the bytes comm_record.py counted with the analytic schedule.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import weakref

import grad_reduce_cases
import optim_cases
import torch
import weights_cases
from torch.testing import assert_close

from paradyse_lab.app.measure.profile_memory import KeptRecorder
from paradyse_lab.core.model_spec import PRESETS, ModelSpec, spec_from_hf
from paradyse_lab.core.strategies import StrategyOption, get_strategy
from paradyse_lab.costmodel.formulas import embedding_params
from paradyse_lab.costmodel.layer_checkpoint import checkpoints_layer
from paradyse_lab.costmodel.schedules import schedule
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime import ParallelGPT, gather_sequence, shard_sequence
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm.record import count_bytes
from paradyse_lab.runtime.hf.convert import hf_to_state_dict
from paradyse_lab.runtime.model.parallel_gpt import STRATEGY_MODULES, run_option
from paradyse_lab.runtime.model.reference import ReferenceGPT, init_state_dict, reference_sublayer
from paradyse_lab.runtime.model.sublayer import Ctx, run_sublayer
from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES, shard_state_dict, shard_sublayer
from paradyse_lab.runtime.strategies.offload import Offloader

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


def sublayer_case(strategy: str, kind: str, causal: bool, recompute: bool, tiled: bool = False,
                  offload: bool = False):
    """One sub-layer under the option against the reference (output, input and parameter gradients), its bytes
    sent against the schedule's; with `+tiled` (5 positions per chunk: uneven chunks at every p) or `+offload`
    also what it keeps on the device (the kept-bytes recorder) and moves to host memory, byte for byte."""
    option = StrategyOption(strategy, recompute, tiled, offload)

    def case(rank: int, p: int, group) -> None:
        cfg = config(causal)
        full, x, dy, yr, dx, grads = sublayer_reference(causal, kind, 1, S, 3)
        x = x.clone()  # the case's own input (shared: the reference's)

        params = [v.clone().requires_grad_() for v in (shard_sublayer(full, kind, rank, p)[n] for n in PARAM_NAMES)]
        before = [v.detach().clone() for v in params]
        xl = shard_sequence(x, 1, group).requires_grad_()
        ctx = Ctx(group=group, p=p, rank=rank, kind=kind, heads=cfg.heads, causal=causal, seq_len=S,
                  eps=cfg.norm_eps, tag="case")
        offloader = Offloader(xl.device)
        with count_bytes() as counter:
            with KeptRecorder(exclude=params) as kept:
                with offloader.sublayer("case", params) if offload else contextlib.nullcontext():
                    y = run_option(option, ctx, xl, params, TILE)
            for now, then in zip(params, before):
                assert torch.equal(now.detach(), then), "a parameter changed during the forward pass"
            y.backward(shard_sequence(dy, 1, group))
        assert_close(y, shard_sequence(yr, 1, group), **TOL)
        assert_close(xl.grad, shard_sequence(dx, 1, group), **TOL)
        ref = shard_sublayer(grads, kind, rank, p)
        for name, prm in zip(PARAM_NAMES, params):
            assert_close(prm.grad, ref[name], **TOL, msg=lambda m, name=name: f"grad of {name}: {m}")
        assert counter.total() == predicted_bytes(cfg, kind, option.name, p), (counter.total(),
                                                                             predicted_bytes(cfg, kind, option.name, p))
        if tiled or offload:
            want = schedule(cfg.with_dtype("fp32"), kind, option, S, B, p, mlp_tile=TILE)
            assert kept.nbytes == want.kept_bytes, (kept.nbytes, want.kept_bytes, list(kept.kept.values()))
            assert offloader.stats.to_host.get("case", 0) == offloader.stats.to_device.get("case", 0) == want.host_bytes
    return case


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


def model_case(plans, causal: bool = True, loss_tile: int = 0, mlp_tile: int = 0, layers: int | None = MODEL_LAYERS):
    """The whole model (`layers` of gpt2-tiny; None: all 4) under `plans` against the reference (`_check_model`)."""
    def case(rank: int, p: int, group) -> None:
        _, sd, ref, model = reference_and_model(causal, group, layers)
        full = model.full_state_dict()  # gathering the shards gives back the full state dict
        assert set(full) == set(sd) and all(torch.equal(full[k], sd[k]) for k in sd)
        _check_model(model, ref, plans, rank, p, group, loss_tile, mlp_tile)
    return case


def llama_techniques_case(rank: int, p: int, group) -> None:
    """The tiled MLP (SwiGLU, 5 positions per chunk) and offload on a LLaMA layer with 2 K/V heads under every
    strategy the GQA rule allows at this p, block and sub-layer plans: logits, loss, gradients and bytes
    (`_check_model`)."""
    cfg = llama_config(2)
    sd, ref = reference(cfg)
    names = feasible(cfg, p)
    n = len(names)
    plans = [[names[0] + "+recompute+tiled+offload", names[1 % n] + "+tiled"],
             [names[2 % n] + "+offload", names[3 % n] + "+tiled+offload", names[1 % n] + "+recompute",
              names[0] + "+tiled"]]
    _check_model(ParallelGPT(cfg, group, state_dict=sd), ref, plans, rank, p, group, mlp_tile=TILE)


def hf_models(rank: int, p: int, group, build, noise: float) -> list:
    """Small random transformers models (built locally, no download) and their logits: rank 0 calls `build()`
    for [(model class, config)], builds each from seed 5, adds `noise` x N(0, 1) to every parameter
    (non-trivial norms and biases) and runs it on seeded ids; every rank gets [(config dict, state dict, ids,
    logits)] (one transformers import per world, not one per rank)."""
    payload = [None]
    if rank == 0:
        payload = [[]]
        for cls, hf_cfg in build():
            torch.manual_seed(5)
            hf = cls(hf_cfg).eval()
            ids = torch.randint(0, hf_cfg.vocab_size, (B, S), generator=torch.Generator().manual_seed(6))
            with torch.no_grad():
                for q in hf.parameters():
                    q.add_(noise * torch.randn_like(q))
                payload[0].append((hf_cfg.to_dict(), hf.state_dict(), ids, hf(ids).logits))
    if p > 1:
        torch.distributed.broadcast_object_list(payload, src=0, group=group)
    return payload[0]


def hf_case(rank: int, p: int, group) -> None:
    """Logits of a small random transformers GPT-2 match (`hf_models`)."""
    def build():
        from transformers import GPT2Config, GPT2LMHeadModel

        return [(GPT2LMHeadModel, GPT2Config(vocab_size=512, n_positions=64, n_embd=96, n_layer=2, n_head=12,
                                             resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                             eos_token_id=0))]

    [(cfg, state, ids, want)] = hf_models(rank, p, group, build, 0.02)
    model = ParallelGPT.from_hf_state_dict(cfg, state, group)
    for plan in (["metp", "ulysses_z+recompute"], ["megatron_ts", "megatron_cz"]):
        with torch.no_grad():
            got = gather_sequence(model(shard_sequence(ids, 1, group), plan), 1, group)
        assert_close(got, want, **TOL)


def bad_input_case(rank: int, p: int, group) -> None:
    """Clear errors: plan of the wrong length, unknown / unusable names, unsplittable lengths and heads."""
    cfg = config(layers=MODEL_LAYERS)  # a plan of 4 names is one per sub-layer; 3 and 5 fit no count
    model = ParallelGPT(cfg, group)
    ids = torch.zeros(1, S // p, dtype=torch.long)

    def expect(fragment: str, fn) -> None:
        try:
            fn()
        except UserInputError as err:
            assert fragment in str(err), f"{fragment!r} not in {err}"
        else:
            raise AssertionError(f"no error for {fragment!r}")

    expect("plan has 3 entries", lambda: model(ids, ["metp"] * 3))
    expect("plan has 5 entries", lambda: model(ids, ["metp"] * 5))
    expect("unknown strategy 'magic'", lambda: model(ids, ["magic"] * 4))
    expect("colossal_z", lambda: model(ids, ["colossal_z"] * 4))
    if p > 1:  # local length 3: s = 3p is not a multiple of the zig-zag unit 2p
        expect(f"multiple of {2 * p}", lambda: model(torch.zeros(1, 3, dtype=torch.long), ["metp"] * 4))
        expect(f"multiple of {2 * p}", lambda: shard_sequence(torch.zeros(1, 3 * p), 1, group))
    if p == 4:  # 6 heads do not split over 4 ranks; the ZeRO-3 ring strategy does not need it
        narrow = ParallelGPT(config(heads=6, layers=MODEL_LAYERS), group)
        expect("heads (6) must be divisible by p (4)", lambda: narrow(ids, ["ulysses_z"] * 4))
        expect("heads (6) must be divisible by p (4)", lambda: narrow(ids, ["megatron_ts"] * 4))
        with torch.no_grad():
            narrow(ids, ["megatron_cz"] * 4)


# --- LLaMA-shaped layers: RMSNorm, SwiGLU, rotary embeddings, grouped-query attention, untied head ---------

LLAMA_KV_HEADS = (1, 2, 12)


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


def llama_hf_case(kv_heads: int):
    """A small random transformers `LlamaForCausalLM` (built on rank 0, sent to the others): the runtime's
    logits equal its logits under mixed plans of every feasible strategy with recompute, and the loss and
    every parameter gradient equal the single-device reference's (`_check_model`, which also checks the
    bytes of every sub-layer and of the embedding against the cost model); the strategies the GQA rule
    excludes at this p are refused with the catalog's sentence."""
    def case(rank: int, p: int, group) -> None:
        def build():
            from transformers import LlamaConfig, LlamaForCausalLM

            cfg = llama_config(kv_heads)
            return [(LlamaForCausalLM, LlamaConfig(
                vocab_size=cfg.vocab_size, hidden_size=cfg.hidden, intermediate_size=cfg.ffn_hidden,
                num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=kv_heads,
                max_position_embeddings=S, rope_theta=cfg.rope_theta, rms_norm_eps=cfg.norm_eps,
                tie_word_embeddings=False))]

        [(hf_cfg, state, ids, want)] = hf_models(rank, p, group, build, 0.05)
        model = ParallelGPT.from_hf_state_dict(hf_cfg, state, group)
        # the one reading of a Hugging Face config: a rotary model's max_position_embeddings is no limit
        assert model.cfg == dataclasses.replace(llama_config(kv_heads), name="hf", max_positions=0), model.cfg
        check_against_hf(model, state, llama_plans(feasible(model.cfg, p)), ids, want, rank, p, group)
        for name in set(STRATEGIES) - set(feasible(model.cfg, p)):  # refused with the catalog's sentence
            problem = get_strategy(name).violation(model.cfg.with_dtype("fp32"), p, S)
            try:
                model(shard_sequence(ids, 1, group), [name] * model.cfg.layers)
            except UserInputError as err:
                assert problem in str(err), (problem, str(err))
            else:
                raise AssertionError(f"{name} ran with kv_heads {kv_heads} at p = {p}")
    return case


def check_against_hf(model: ParallelGPT, state, plans, ids, want, rank: int, p: int, group) -> None:
    """Logits under each plan on `ids` equal transformers' `want` (fp32, 1e-4), and loss, every gradient and the
    bytes equal the single-device reference's with the same weights, in the same steps (`_check_model`). The
    reference loads transformers' `state` converted as the model's was (`hf_to_state_dict`), on each rank: no
    gather of the shards (~20 collectives a model; the shards' round trip is test_local.py's
    test_llama_weight_shards_round_trip, the gather vocab-parallel-llama-*'s)."""
    ref = ReferenceGPT(model.cfg)
    ref.load_state_dict(hf_to_state_dict(state, model.cfg))
    _check_model(model, ref, plans, rank, p, group, hf=(ids, want))


def llama_variants_hf_case(rank: int, p: int, group) -> None:
    """The flags' other settings against transformers: LLaMA with biases on every linear layer and a tied
    head, Llama 3.1's rotary scaling (original context 16 < S = 48, so every frequency band is scaled),
    Mistral without a sliding window (1 K/V head), and Qwen2 (biases on q, k, v only): logits, gradients and
    bytes as above."""
    def build():
        from transformers import (
            LlamaConfig,
            LlamaForCausalLM,
            MistralConfig,
            MistralForCausalLM,
            Qwen2Config,
            Qwen2ForCausalLM,
        )

        shape = dict(vocab_size=64, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                     max_position_embeddings=S)
        llama31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 16, "rope_theta": 500000.0}
        return [(LlamaForCausalLM, LlamaConfig(num_key_value_heads=2, attention_bias=True, mlp_bias=True,
                                               tie_word_embeddings=True, **shape)),
                (LlamaForCausalLM, LlamaConfig(num_key_value_heads=2, rope_parameters=llama31, **shape)),
                (MistralForCausalLM, MistralConfig(num_key_value_heads=1, sliding_window=None, **shape)),
                (Qwen2ForCausalLM, Qwen2Config(num_key_value_heads=2, **shape))]

    for hf_cfg, state, ids, want in hf_models(rank, p, group, build, 0.05):
        model = ParallelGPT.from_hf_state_dict(hf_cfg, state, group)
        assert model.cfg.bias == model.cfg.tied == (hf_cfg["model_type"] == "llama" and hf_cfg["attention_bias"])
        assert model.cfg.qkv_bias == (hf_cfg["model_type"] == "qwen2")
        assert (model.cfg.rope_llama3 is not None) == ("llama3" in str(hf_cfg.get("rope_parameters")))
        plans = llama_plans(feasible(model.cfg, p))[1:]  # the per-sub-layer plan: every strategy, both kinds
        check_against_hf(model, state, plans, ids, want, rank, p, group)


def llama_from_hf_refusals_case(rank: int, p: int, group) -> None:
    """Other model types, rotary scalings other than Llama 3.1's (and an incomplete one), sliding windows
    (Mistral, Qwen2) and other activations are refused with one line naming the field; Mistral without a
    window is the LLaMA layer."""
    base = {"model_type": "llama", "vocab_size": 64, "hidden_size": 48, "intermediate_size": 96,
            "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "rope_theta": 500000.0}
    for change, fragment in (({"model_type": "qwen2", "use_sliding_window": True}, "use_sliding_window true"),
                             ({"model_type": "falcon"}, 'model_type "falcon" is not supported'),
                             ({"rope_scaling": {"rope_type": "yarn", "factor": 8.0}}, 'rope_scaling "yarn"'),
                             ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "needs factor"),
                             ({"model_type": "mistral", "sliding_window": 4096}, "sliding_window 4096"),
                             ({"hidden_act": "gelu"}, 'hidden_act "gelu"')):
        try:
            spec_from_hf({**base, **change})
        except UserInputError as err:
            assert fragment in str(err) and "\n" not in str(err), str(err)
        else:
            raise AssertionError(f"no error for {change}")
    mistral = spec_from_hf({**base, "model_type": "mistral", "sliding_window": None})
    assert mistral == spec_from_hf(base) and mistral.rope_theta == 500000.0 and mistral.kv_heads == 2


def llama_gqa_mlp_case(causal: bool):
    """One K/V head (fewer than p for p > 1), causal or bidirectional: attention under the strategies the GQA
    rule allows, and megatron_ts and metp, which cannot split one K/V head, on the MLP sub-layers (an MLP
    has no heads), with recompute; bidirectional also a plan with one name per layer: logits, loss, every
    gradient and every sub-layer's bytes against the reference and the schedules (`_check_model`)."""
    def case(rank: int, p: int, group) -> None:
        cfg = dataclasses.replace(llama_config(1), causal=causal)
        spec = cfg.with_dtype("fp32")
        attn = [n for n in STRATEGIES if get_strategy(n).violation(spec, p, S, "attention") is None]
        sd, ref = reference(cfg)
        model = ParallelGPT(cfg, group, state_dict=sd)
        plans = [[attn[0], "megatron_ts", attn[-1] + "+recompute", "metp+recompute"]]  # attention, MLP per layer
        if not causal:
            plans.append([attn[-1] + "+recompute", attn[0]])
        _check_model(model, ref, plans, rank, p, group)
        if causal:  # the tiled loss on the untied head and RMSNorm: 7 tokens per tile
            _check_model(model, ref, plans, rank, p, group, loss_tile=7)
    return case


CASES = {}
ONLY_AT: dict[str, tuple[int, ...]] = {}
"""World sizes of the cases whose subject does not change with p (each case says why); the others run at
every world size of test_distributed.py."""
ONE_SUBLAYER_AT = (2,)
"""World sizes of the plain one-sub-layer cases: p = 2, the cheapest world that communicates. At p = 1, 2, 3 and 4
every strategy, with and without recomputation, causal and bidirectional, on attention and MLP sub-layers, runs
against the reference (outputs, every parameter's gradient: a wrong input gradient shows in the layers below) and
the schedules' bytes sub-layer by sub-layer in the whole-model cases (model-mixed-switching-*: one name per
sub-layer when causal, one per layer when bidirectional; at p = 4 also one strategy throughout, model-*-causal).
The `-tiled-offload` and
`-offload` ones stay at every p: they alone count the bytes kept for the backward, a count in p."""
PACKED_SUBLAYER_AT = {True: (4,), False: (2,)}
"""World sizes of the packed one-sub-layer cases, causal and bidirectional: the only check that a strategy sends
over a pack the bytes of the unpacked schedule at the padded length, for every strategy at p = 4 (causal) and p = 2
(bidirectional). p = 1 sends nothing, and packed-model-* check outputs and gradients over packs under every
strategy at every p (documents padded to 2p = 6 at p = 3)."""
for _kv in LLAMA_KV_HEADS:
    CASES[f"llama-hf-logits-and-grads-kv{_kv}"] = llama_hf_case(_kv)
    ONLY_AT[f"llama-hf-logits-and-grads-kv{_kv}"] = (2, 4)  # p = 3 (no transformers import in that world, 6 s
    # a rank): its uneven K/V split is checked against the reference by llama-kv1-ts-metp-mlps-causal; p = 1: the
    # conversion is the one p = 2 and 4 check, and the unsharded model against the reference is llama-tiled-offload's
CASES["llama-hf-variants"] = llama_variants_hf_case
ONLY_AT["llama-hf-variants"] = (2,)  # the other flags' conversions; every strategy at p = 2
CASES["llama-from-hf-refusals"] = llama_from_hf_refusals_case
for _causal in (True, False):
    CASES[f"llama-kv1-ts-metp-mlps-{'causal' if _causal else 'bidir'}"] = llama_gqa_mlp_case(_causal)
ONLY_AT["llama-kv1-ts-metp-mlps-bidir"] = (4,)  # a LLaMA without the mask, where one K/V head is fewest per rank
ONLY_AT["llama-from-hf-refusals"] = (1,)  # config parsing, no ranks involved
for _strategy in STRATEGIES:
    for _kind in ("attention", "mlp"):
        for _causal in (True, False) if _kind == "attention" else (True,):  # an MLP has no mask: one case
            for _recompute in (False, True):
                _name = f"sublayer-{_strategy}-{_kind}-{'causal' if _causal else 'bidir'}" + (
                    "-recompute" if _recompute else "")
                CASES[_name] = sublayer_case(_strategy, _kind, _causal, _recompute)
                ONLY_AT[_name] = ONE_SUBLAYER_AT
    # the tiled MLP offloading its input, and the whole kept set of an attention (views, lse, shared storages)
    CASES[f"sublayer-{_strategy}-mlp-tiled-offload"] = sublayer_case(_strategy, "mlp", True, False, True, True)
    CASES[f"sublayer-{_strategy}-attention-offload"] = sublayer_case(_strategy, "attention", True, False, offload=True)
SWITCHING_PLANS = (  # on MODEL_LAYERS = 2 layers: each strategy with and without recompute on each kind
    ["megatron_ts", "megatron_cz+recompute", "ulysses_z", "metp+recompute"],
    ["metp", "ulysses_z+recompute", "megatron_cz", "megatron_ts+recompute"],
    ["megatron_ts+recompute", "ulysses_z", "megatron_cz+recompute", "metp"],
    ["ulysses_z+recompute", "megatron_ts", "metp+recompute", "megatron_cz"],
)
"""Four plans of one name per sub-layer (attention, MLP of layer 0, then of layer 1): every strategy runs an
attention and an MLP sub-layer with and without recompute, and the strategy changes at every sub-layer. The first
two, read as plans of one name per layer (`_per_layer`), run the same 16 (strategy, recompute, kind) sub-layers
and change the strategy at every layer."""


def _per_layer(plans) -> list[list[str]]:
    """Each 4-name plan as two plans of one name per layer of MODEL_LAYERS = 2: its (1st, 2nd) and (3rd, 4th)."""
    return [plan[i:i + 2] for plan in plans for i in (0, 2)]


for _causal in (True, False):
    _tag = "causal" if _causal else "bidir"
    for _strategy in STRATEGIES if _causal else ():  # bidirectional: every strategy is in the mixed plans below
        if _strategy == "megatron_cz":  # its plan of one name per layer is model-mixed-switching-causal's last
            continue
        CASES[f"model-{_strategy}-{_tag}"] = model_case([[_strategy] * MODEL_LAYERS], _causal)  # and its attention
        ONLY_AT[f"model-{_strategy}-{_tag}"] = (4,)  # above; p = 1, 2 and 3: every strategy in the mixed plans below
# causal: one name per sub-layer, then one strategy by sub-layer with recompute on its MLPs alone, and one by layer
# throughout (plans that never switch strategy); bidirectional: the 16 (strategy, recompute, kind) sub-layers by layer
CASES["model-mixed-switching-causal"] = model_case([*SWITCHING_PLANS, ["metp", "metp+recompute"] * MODEL_LAYERS,
                                                    ["megatron_cz", "megatron_cz"]], True)
CASES["model-mixed-switching-bidir"] = model_case(_per_layer(SWITCHING_PLANS[:2]), False)
for _tile, _plan in ((5, ["megatron_ts", "megatron_cz+recompute", "ulysses_z", "metp+recompute"]),
                     (S, ["metp", "ulysses_z+recompute", "megatron_cz", "megatron_ts+recompute"])):
    # tiles that do not divide a rank's B * S / p tokens, and one tile over them all; every strategy in each plan
    # (one name per sub-layer of MODEL_LAYERS)
    CASES[f"tiled-loss-{_tile}-mixed-causal"] = model_case([_plan], True, loss_tile=_tile)
ONLY_AT[f"tiled-loss-{S}-mixed-causal"] = (1, 2, 3)  # p = 4: the uneven tiles above; one tile is p's token count
CASES["model-tiled-offload-mixed-causal"] = model_case([  # every strategy with each technique, 5 positions a chunk
    ["megatron_ts+tiled", "megatron_cz+recompute+tiled+offload", "ulysses_z+offload", "metp+recompute+tiled"],
    ["metp+tiled+offload", "ulysses_z+recompute+offload", "megatron_cz+tiled", "megatron_ts+recompute+tiled+offload"],
    ["megatron_ts+offload", "metp+tiled", "megatron_cz+recompute+offload", "ulysses_z+tiled+offload",
     "ulysses_z+recompute", "megatron_cz+tiled", "metp+offload", "megatron_ts+tiled+offload"],
], mlp_tile=TILE, layers=None)  # gpt2-tiny's 4 layers: each option on both kinds of sub-layer
CASES["model-tiled-alst-chunks-causal"] = model_case([  # ALST's rule: ceil(positions / hidden) chunks (one here)
    ["metp+tiled", "megatron_cz+tiled+offload", "ulysses_z+recompute+tiled", "megatron_ts+tiled"],
], layers=None)
ONLY_AT["model-tiled-alst-chunks-causal"] = (1,)  # the default chunk size; exactness at every p: the case above
CASES["llama-tiled-offload"] = llama_techniques_case


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

    from paradyse_lab.app.measure.profile_memory import KeptRecorder
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


for _llama, _tile, _plan in ((False, 5, 0), (False, 0, 1), (True, 7, 0)):
    CASES[f"vocab-parallel-{'llama' if _llama else 'gpt2'}-tile{_tile}"] = vocab_parallel_case(_llama, _tile, _plan)
ONLY_AT["vocab-parallel-gpt2-tile0"] = (3,)  # one tile of all tokens, where p does not divide V (tile 5: every p)
ONLY_AT["vocab-parallel-llama-tile7"] = (1, 2, 4)  # p = 3: the tied LLaMA below (GPT-2: every p)
CASES["vocab-parallel-llama-tied-tile5"] = vocab_parallel_case(True, 5, tied=True)  # 32 tokens a rank: 6 tiles of
# 5 and a last one of 2 (each tile's gathers and reductions are collectives: tiles of 3 made 11 tiles and 368
# collectives a rank, tiles of 5 make 280)
ONLY_AT["vocab-parallel-llama-tied-tile5"] = (3,)  # the tied LLaMA where p does not divide V (untied: every p)
CASES["vocab-parallel-kept"] = vocab_parallel_kept_case
ONLY_AT["vocab-parallel-kept"] = (3,)  # counts in p, checked where p does not divide V (FlopCounterMode: 6 s a world)
CASES["hf-gpt2-logits"] = hf_case
ONLY_AT["hf-gpt2-logits"] = (2,)  # the conversion does not depend on p; sharding is checked by model-* at every p
CASES["bad-input"] = bad_input_case


# --- packed documents: attention confined to each document, under every strategy --------------------------

PACKS = ((1, 13, 5, 1, 27), (3, 1, 9, 30))
"""Documents of the packed cases: lengths not multiples of 2p, single-token documents (padded to 2p, so
most ranks hold only their padding), documents longer than a rank's share of the pack, and for p > 1 every
document padded to 2p by its own padding segment (pack 1: 47 tokens -> 60 at p = 2, 66 at p = 3, 72 at p = 4)."""


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
CASES["packed-llama-gqa-causal"] = packed_model_case([None, None], True, llama_kv=2)


# --- training ---------------------------------------------------------------------------------------------

def _shared_tmpdir(rank: int, p: int, group) -> str:
    import tempfile

    import torch.distributed as dist

    box = [tempfile.mkdtemp(prefix="paradyse-ckpt-") if rank == 0 else None]
    if p > 1:
        dist.broadcast_object_list(box, src=0, group=group)
    return box[0]


def _shared_config(root: str, name: str, fields: dict, rank: int, p: int, group) -> str:
    """root/NAME (a Hugging Face config.json of `fields`), written by rank 0 and seen by every rank."""
    import json
    import os

    config = os.path.join(root, name)
    if rank == 0:
        with open(config, "w") as f:
            json.dump(fields, f)
    if p > 1:
        torch.distributed.barrier(group=group)
    return config


def _micro_gpt2_config(root: str, rank: int, p: int, group, vocab_size: int, positions: int = 64) -> str:
    """A tiny GPT-2 config.json under `root` (2 layers, h 24: 12 heads of width 2), for the training cases whose
    subject is not the model's size."""
    return _shared_config(root, "micro-gpt2.json", {"model_type": "gpt2", "n_embd": 24, "n_head": 12, "n_layer": 2,
                                                    "n_positions": positions, "vocab_size": vocab_size}, rank, p, group)


def _micro_llama_config(root: str, rank: int, p: int, group) -> str:
    """A micro LLaMA config.json under `root`: h 48, 8 heads of width 6 on 2 K/V heads, SwiGLU of 96, 2 layers,
    128 tokens, an untied head."""
    return _shared_config(root, "micro-llama.json", {
        "model_type": "llama", "hidden_size": 48, "num_attention_heads": 8, "num_key_value_heads": 2,
        "intermediate_size": 96, "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 64,
        "tie_word_embeddings": False, "rms_norm_eps": 1e-5}, rank, p, group)


def _set_aside(ckpt: str, step: int, root: str, rank: int, p: int, group) -> str:
    """Move the checkpoint of `step` out of the folder `ckpt` into `root` (rank 0, between barriers), so that a
    resumed run takes the newest one left; returns where it went."""
    import os

    name = f"step-{step:06d}"
    if p > 1:
        torch.distributed.barrier(group=group)
    if rank == 0:
        os.rename(os.path.join(ckpt, name), os.path.join(root, name))
    if p > 1:
        torch.distributed.barrier(group=group)
    return os.path.join(root, name)


def _assert_same_checkpoints(a: str, b: str, rank: int) -> set[str]:
    """On rank 0 (the files every rank wrote, read whole by one): the checkpoints at `a` and `b` hold the same
    entries, bit for bit; returns their names (none on the other ranks)."""
    from paradyse_lab.runtime.checkpoints.dcp import read_entries

    if rank != 0:
        return set()
    want, _ = read_entries(a)
    got, _ = read_entries(b)
    assert want.keys() == got.keys(), sorted(set(want) ^ set(got))
    for key, value in want.items():
        assert torch.equal(value, got[key]), key
    return set(want)


class CountedPolicy:
    """The policy `inner`, counting the decisions asked of it."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def decide(self, step, batch):
        self.calls += 1
        return self.inner.decide(step, batch)


def checkpoint_resume_case(rank: int, p: int, group) -> None:
    """Resuming from the sharded checkpoint of step 1 ends bit-identical to the unbroken run that wrote it (a micro
    GPT-2, `_micro_gpt2_config`; its step-2 checkpoint set aside, so that step 1's is the newest: step 2's update
    takes AdamW's restored moments). The resumed run replays the policy's decision of step 1 on rank 0 only (the
    one rank that decides): the other ranks ask their policy nothing, neither replaying nor training. With two
    ranks, one damaged shard then makes both fall back to step 1 together (`_falls_back_together`)."""
    import os
    from unittest import mock

    import torch.distributed as dist

    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import train
    from paradyse_lab.runtime.checkpoints import folder as checkpoint
    from paradyse_lab.simulator import planner

    root = _shared_tmpdir(rank, p, group)
    common = {"model": _micro_gpt2_config(root, rank, p, group, 96), "dataset": "uniform:512:1024", "max_len": S,
              "progress": False, "checkpoint_every": 1}
    ckpt = os.path.join(root, "a")
    straight = train(TrainOptions(steps=2, checkpoint_dir=ckpt, **common), group)
    step2 = _set_aside(ckpt, 2, root, rank, p, group)  # resuming takes step 1, the newest left
    real, built = planner.build_policy, []

    def counted(*args, **kwargs):
        built.append(CountedPolicy(real(*args, **kwargs)))
        return built[-1]

    with mock.patch.object(planner, "build_policy", counted):
        resumed = train(TrainOptions(steps=2, checkpoint_dir=ckpt, resume=True, **common), group)
    assert [policy.calls for policy in built] == [1 + 1 if rank == 0 else 0]  # step 1 replayed, step 2 trained
    assert [r["step"] for r in resumed] == [2]
    assert [r["loss"] for r in resumed] == [r["loss"] for r in straight[1:]]
    names = _assert_same_checkpoints(step2, checkpoint.latest(ckpt), rank)  # weights and AdamW's moments
    assert rank != 0 or any(k.startswith("optim.exp_avg_sq.") for k in names)
    if p > 1:
        _falls_back_together(ckpt, step2, straight, common, rank, p, group)
        dist.barrier(group=group)
    if rank == 0:
        import shutil

        shutil.rmtree(root)


def train_vocab_parallel_case(rank: int, p: int, group) -> None:
    """`train` with the embedding and head stored by vocabulary rows (a micro GPT-2 of 97 tied rows, which p does
    not divide) gives the losses and gradient norms of the replicated run (AdamW on the rows, clipping by the
    global norm, the sharded table's gradients counted once) and evaluation losses, also across a stop at step 2 and
    a resume from its checkpoint. The storage follows the head rank 0's planner takes at the run's longest step
    (`vocab_storage`; the policy here is told 'vocab', tests/simulator/test_head_options.py has the planner take
    it), and the policy then plans every step with it alone."""
    import os

    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import plan_policy
    from paradyse_lab.runtime.training.loop import train

    root = _shared_tmpdir(rank, p, group)
    config = _micro_gpt2_config(root, rank, p, group, 97)
    told = []

    def policy_for(opts, vocab: bool):
        def build(spec, world):
            policy = plan_policy(opts, spec, world, quiet=True)
            if vocab:  # rank 0's answer is the one every rank follows
                policy.storage_head = lambda seq_len, batch: "vocab" if rank == 0 else "whole"
            told.append(policy)
            return policy
        return build

    common = {"model": config, "dataset": "uniform:48:48", "max_len": S, "progress": False, "lr": 3e-3,
              "clip_grad": 0.5, "checkpoint_every": 2, "policy": "dynamic:heuristic", "eval_dataset": "uniform:48:48",
              "eval_every": 3, "eval_batches": 1}
    replicated = TrainOptions(steps=3, **common)
    replicated = train(replicated, group, policy_for=policy_for(replicated, False))
    opts = TrainOptions(steps=2, checkpoint_dir=os.path.join(root, "a"), **common)
    sharded = train(opts, group, policy_for=policy_for(opts, True))
    assert tuple(told[-1]._head_models) == ("vocab",) and tuple(told[0]._head_models) == ("whole", "tiled")
    resumed = TrainOptions(steps=3, checkpoint_dir=os.path.join(root, "a"), resume=True, **common)
    sharded += train(resumed, group, policy_for=policy_for(resumed, True))  # step 3 from the checkpoint of step 2
    assert [r["step"] for r in sharded] == [1, 2, 3]
    assert_close(torch.tensor([r["loss"] for r in sharded]), torch.tensor([r["loss"] for r in replicated]),
                 rtol=0, atol=1e-5)
    assert_close(torch.tensor([r["grad_norm"] for r in sharded]), torch.tensor([r["grad_norm"] for r in replicated]),
                 rtol=1e-5, atol=1e-6)
    assert abs(sharded[-1]["eval_loss"] - replicated[-1]["eval_loss"]) < 1e-5  # evaluation in the loss's tiles
    if p > 1:
        torch.distributed.barrier(group=group)
    if rank == 0:
        import shutil

        shutil.rmtree(root)


def _falls_back_together(ckpt: str, step2: str, straight: list[dict], common: dict, rank: int, p: int,
                         group) -> None:
    """One rank's damaged shard of the newest checkpoint (step 2, in `ckpt`) makes every rank fall back to the
    previous one (step 1) together (the ranks agree on which checkpoint verifies): the run trains step 2 again,
    bit-identical to the unbroken run (`straight`, its step-2 checkpoint set aside at `step2`), so step 1's
    checkpoint was left intact."""
    import os

    import torch.distributed as dist

    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import train
    from paradyse_lab.runtime.checkpoints import folder as checkpoint

    dist.barrier(group=group)  # rank 0 has read the checkpoints it compared
    if rank == p - 1:  # only the last rank's shard of the newest checkpoint is damaged
        shard = os.path.join(checkpoint.latest(ckpt), f"__{rank}_0.distcp")  # torch.distributed.checkpoint's
        data = bytearray(open(shard, "rb").read())
        data[len(data) // 2] ^= 0xFF
        open(shard, "wb").write(bytes(data))
    dist.barrier(group=group)
    again = train(TrainOptions(steps=2, checkpoint_dir=ckpt, resume=True, **common), group)
    assert [r["step"] for r in again] == [2], [r["step"] for r in again]
    assert [r["loss"] for r in again] == [r["loss"] for r in straight[1:]]
    _assert_same_checkpoints(step2, checkpoint.latest(ckpt), rank)


def checkpoint_disk_full_case(rank: int, p: int, group) -> None:
    """The disk filling up while one rank writes its part of a checkpoint (ENOSPC from a write inside
    torch.distributed.checkpoint) stops every rank with one line naming that rank and the error, removes the
    partial `.tmp-step-*` folder, and leaves the previous checkpoint intact and named by `latest`."""
    import errno
    import os
    from unittest import mock

    import torch.distributed as dist
    import torch.distributed.checkpoint.filesystem as dcp_files

    from paradyse_lab.errors import RunStopped
    from paradyse_lab.runtime.checkpoints import dcp as dcp_checkpoint
    from paradyse_lab.runtime.checkpoints import folder as checkpoint

    root = _shared_tmpdir(rank, p, group)
    cfg = config(layers=MODEL_LAYERS)  # the checkpoint's files are the subject, not the depth
    model = ParallelGPT(cfg, group, seed=1)
    trained, opt = dict(model.named_parameters()), torch.optim.AdamW(model.parameters())
    meta = {"model": "m", "seed": 0}
    dcp_checkpoint.save(root, 1, trained, opt, cfg, meta, dcp_checkpoint.model_record(cfg), group)
    real_write = dcp_files._write_item

    def full_disk(transforms, stream, data, *args, **kwargs):
        stream.write(b"partial")  # part of the data reaches the disk, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), getattr(stream, "name", None))

    with torch.no_grad():
        for q in model.parameters():
            q.add_(1.0)
    with mock.patch.object(dcp_files, "_write_item", full_disk if rank == p - 1 else real_write):
        try:
            dcp_checkpoint.save(root, 2, trained, opt, cfg, meta, dcp_checkpoint.model_record(cfg), group)
        except RunStopped as err:
            message = str(err)
        else:
            raise AssertionError("a full disk did not stop the checkpoint")
    assert "\n" not in message and f"rank {p - 1}" in message and "No space left on device" in message, message
    assert sorted(os.listdir(root)) == ["latest", "step-000001"], os.listdir(root)
    weights, _ = dcp_checkpoint.read_full(checkpoint.latest(root))  # verified, readable: step 1's weights
    for key, value in model.full_state_dict().items():
        assert_close(weights[key] + 1.0, value, rtol=0, atol=1e-6, msg=key)
    if p > 1:
        dist.barrier(group=group)
    if rank == 0:
        import shutil

        shutil.rmtree(root)


def checkpoint_lock_refused_case(rank: int, p: int, group) -> None:
    """A run whose --checkpoint-dir rank 0 cannot lock stops on every rank with the same one-line
    `UserInputError`, within seconds: a folder whose lock another run holds (the holder named), and one whose
    lock file cannot be opened (a folder in its place). Rank 0 raised alone there and left the other ranks
    waiting for its answer until the process group's timeout."""
    import fcntl
    import os
    import shutil
    import time

    import torch.distributed as dist

    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import train

    root = _shared_tmpdir(rank, p, group)
    held, broken = os.path.join(root, "held"), os.path.join(root, "broken")
    if rank == 0:
        os.makedirs(os.path.join(broken, ".lock"))  # a folder where the lock file goes
        os.makedirs(held)
        holder = os.open(os.path.join(held, ".lock"), os.O_RDWR | os.O_CREAT)  # held as another run holds it
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)  # flock: this descriptor's, not the process's
        os.pwrite(holder, b"pid 4242 on elsewhere\n", 0)
    dist.barrier(group=group)
    for folder, reason in ((broken, "cannot be locked for this run: Is a directory"),
                           (held, "is in use by another run (pid 4242 on elsewhere)")):
        started = time.monotonic()
        try:
            train(TrainOptions(model="gpt2-tiny", dataset="uniform:8:16", steps=1, max_len=16, progress=False,
                               checkpoint_dir=folder), group)
        except UserInputError as err:
            message = str(err)
        else:
            raise AssertionError(f"a run on {folder} was not refused")
        assert reason in message and "\n" not in message and f"--checkpoint-dir {folder!r}" in message, message
        assert time.monotonic() - started < 30, time.monotonic() - started
    dist.barrier(group=group)
    if rank == 0:
        os.close(holder)
        shutil.rmtree(root)


def plan_decided_on_rank0_case(rank: int, p: int, group) -> None:
    """A solver that picks a different plan on every rank still gives every rank rank 0's plan, and only
    rank 0 runs it: directly, and inside `train` (whose policy is replaced by such a solver)."""
    from unittest import mock

    import torch.distributed as dist

    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import train
    from paradyse_lab.core.plan import Plan
    from paradyse_lab.runtime.training.plan_handoff import decide_plan_on_rank0
    from paradyse_lab.simulator.policies import StepDecision

    calls: list[int] = []

    def disagreeing_solver(*_args):
        calls.append(rank)
        plan = ("megatron_ts", "metp", "ulysses_z", "megatron_cz")[rank % 4:] + ("metp",) * (rank % 4)
        return StepDecision(plan=Plan.from_names(plan), predicted_time_s=float(rank), feasible=True, solve_s=0.0)

    def everyone(value):
        out = [None] * p
        if p > 1:
            dist.all_gather_object(out, value, group=group)
        return out if p > 1 else [value]

    got = decide_plan_on_rank0(disagreeing_solver, group)
    assert everyone(got.plan.names) == [("megatron_ts", "metp", "ulysses_z", "megatron_cz")] * p
    assert got.predicted_time_s == 0.0 and calls == ([0] if rank == 0 else [])

    calls.clear()
    policy = mock.Mock(decide=disagreeing_solver)
    with mock.patch("paradyse_lab.simulator.planner.build_policy", return_value=policy):
        log = train(TrainOptions(model="gpt2-tiny", dataset="uniform:512:1024", steps=2, max_len=S, progress=False),
                    group)
    assert everyone([r["plan"] for r in log]) == [["TS,ME,UZ,CZ"] * 2] * p
    assert calls == ([0, 0] if rank == 0 else [])


def train_packed_loss_falls_case(rank: int, p: int, group) -> None:
    """`train --pack-tokens 96` (gloo, p = 2; a micro GPT-2, `_micro_gpt2_config`, dynamic:dp, AdamW): every step
    is a pack of several of the length file's documents, every document padded to 2p (a pack: at most 96 tokens
    plus 2p - 1 per document), and the loss falls over 4 passes over the 3 packs (the last pass's mean 1.0 below
    the first's here)."""
    import os

    import torch.distributed as dist

    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import train

    root = _shared_tmpdir(rank, p, group)
    lengths = os.path.join(root, "lengths.txt")
    if rank == 0:
        with open(lengths, "w") as f:
            f.write("\n".join(map(str, (5, 9, 17, 30, 48, 12, 3, 1, 26, 40, 7, 21, 33, 2, 14))))
    dist.barrier(group=group)
    log = train(TrainOptions(model=_micro_gpt2_config(root, rank, p, group, 96), dataset=f"file:{lengths}", steps=12,
                             lr=1e-2, max_len=S, pack_tokens=96, progress=False), group)
    assert all(r["seq_len"] % (2 * p) == 0 and r["seq_len"] <= 96 + (2 * p - 1) * r["docs"] for r in log)
    assert [r["docs"] for r in log[:6]] == [6, 5, 4] * 2  # 3 packs of all 15 documents (first-fit decreasing)
    assert {r["attention_kernel"] for r in log} == {"sdpa_cpu_varlen"}  # the fused CPU kernel per document, no mask
    first, last = (sum(r["loss"] for r in rows) / len(rows) for rows in (log[:3], log[-3:]))  # the same 3 packs
    assert last < first - 0.5, (first, last)
    dist.barrier(group=group)
    if rank == 0:
        import shutil

        shutil.rmtree(root)


def llama_train_case(rank: int, p: int, group) -> None:
    """`train --model CONFIG.json` of a micro LLaMA (`_micro_llama_config`: RMSNorm, SwiGLU, RoPE, 8 heads on 2 K/V
    heads, untied head) under ulysses_z: the loss falls over 10 steps (the last 4 steps' mean 0.5 below the first
    4's here), and resuming from the step-8 checkpoint repeats steps 9-10 bit-identically (losses and the step-10
    weights). The llama-tiny preset trains in api-example (examples/plan_and_train.py).
    p = 2 only (ONLY_AT): learning is the loop's; every strategy's gradients at p = 1..4 are the llama-model
    and llama-hf cases'."""
    import os

    import torch.distributed as dist

    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import train
    from paradyse_lab.runtime.checkpoints import folder as checkpoint

    root = _shared_tmpdir(rank, p, group)
    ckpt = os.path.join(root, "ck")
    common = {"model": _micro_llama_config(root, rank, p, group), "dataset": "uniform:512:1024", "max_len": S,
              "progress": False, "checkpoint_every": 8, "lr": 1e-2, "policy": "static:ulysses_z",
              "checkpoint_dir": ckpt}
    straight = train(TrainOptions(steps=10, **common), group)
    first, last = (sum(r["loss"] for r in rows) / len(rows) for rows in (straight[:4], straight[-4:]))
    assert last < first - 0.3, (first, last)
    step10 = _set_aside(ckpt, 10, root, rank, p, group)  # resuming takes step 8, the newest left
    resumed = train(TrainOptions(steps=10, resume=True, **common), group)
    assert [r["step"] for r in resumed] == [9, 10]
    assert [r["loss"] for r in resumed] == [r["loss"] for r in straight[8:]]
    assert rank != 0 or "model.head" in _assert_same_checkpoints(step10, checkpoint.latest(ckpt), rank)
    dist.barrier(group=group)
    if rank == 0:
        import shutil

        shutil.rmtree(root)


CASES["llama-train-falls-and-resumes"] = llama_train_case
ONLY_AT["llama-train-falls-and-resumes"] = (2,)
CASES["plan-decided-on-rank0"] = plan_decided_on_rank0_case
ONLY_AT["plan-decided-on-rank0"] = (2,)  # two ranks that disagree are the whole mechanism (rank 0 broadcasts)
CASES["train-packed-loss-falls"] = train_packed_loss_falls_case
ONLY_AT["train-packed-loss-falls"] = (2,)  # the packed loop at one world size; packed gradients: packed-* cases
CASES["train-vocab-parallel"] = train_vocab_parallel_case
ONLY_AT["train-vocab-parallel"] = (2,)  # the loop over sharded rows; the rows' gradients at every p: vocab-parallel-*
CASES["checkpoint-resume-bit-identical"] = checkpoint_resume_case
CASES["checkpoint-disk-full"] = checkpoint_disk_full_case
CASES["checkpoint-lock-refused"] = checkpoint_lock_refused_case
ONLY_AT["checkpoint-lock-refused"] = (2,)  # rank 0 locks, the others wait for its answer
for _name in ("checkpoint-resume-bit-identical", "checkpoint-disk-full"):
    # one rank, and two ranks whose shards differ (a rank loading another's shard fails there); more ranks
    # repeat the same per-rank files at the price of every rank's first `train` (optimizer and solver imports)
    ONLY_AT[_name] = (1, 2)


# --- the profiler's distributed mode ------------------------------------------------------------------------

def profile_distributed_case(rank: int, p: int, group) -> None:
    """`profile --mode distributed` in this process group (what torchrun runs, minus setting the group up):
    rank 0 writes a valid profile, one measured-distributed row per (option, length), positive times, and its
    kept and (CPU: lower-bound) peak bytes equal the rank-local mode's for the same p."""
    import argparse
    import os

    import torch.distributed as dist

    from paradyse_lab.app.measure.profiler import profile, profile_distributed
    from paradyse_lab.cli.profile_command import add_arguments, parse_options
    from paradyse_lab.costmodel.profiles import read_profiles

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    root = _shared_tmpdir(rank, p, group)
    out = os.path.join(root, "prof.csv")
    common = ["--model", "gpt2-tiny", "--seqs", f"{S},{2 * S}", "--strategies", "megatron_ts,ulysses_z+recompute",
              "--layers", "1", "--warmup", "0", "--repeats", "1", "--out", out]
    args = parser.parse_args(common + ["--mode", "distributed"])
    rows = profile_distributed(parse_options(args), args.out, group, progress=False)
    assert len(rows) == 4 and (rows["p"] == p).all()
    if p > 1:
        dist.barrier(group=group)  # rank 0 has written the file
    if rank == 0:
        df = read_profiles(out)
        assert set(df["source"]) == {"measured-distributed"} and (df["p"] == p).all() and (df["layers"] == 1).all()
        key = ["strategy", "recompute", "seq_len"]
        assert sorted(map(tuple, df[key].to_numpy().tolist())) == [
            ("megatron_ts", False, S), ("megatron_ts", False, 2 * S),
            ("ulysses_z", True, S), ("ulysses_z", True, 2 * S)]
        assert (df["time_s"] > 0).all() and (df["kept_bytes"] > 0).all()
        assert df["software"].str.contains("torch=").all()
        assert os.listdir(root) == ["prof.csv"]  # written atomically: no temporary file left
        local = profile(parse_options(parser.parse_args(common + ["--mode", "rank-local", "--p", str(p)])),
                        progress=False)
        assert set(local["source"]) == {"measured-rank-local"}
        local["recompute"] = local["recompute"] == "true"
        both = df.merge(local, on=key, suffixes=("", "_local")).sort_values(key)
        assert len(both) == 4
        assert (both["kept_bytes"] == both["kept_bytes_local"]).all(), both[key + ["kept_bytes", "kept_bytes_local"]]
        assert (both["peak_bytes"] == both["peak_bytes_local"]).all(), both[key + ["peak_bytes", "peak_bytes_local"]]
        kept = dict(zip(zip(both["strategy"], both["seq_len"]), both["kept_bytes"]))
        assert kept[("ulysses_z", S)] < kept[("megatron_ts", S)]  # recomputation keeps only the layer inputs
        assert kept[("megatron_ts", S)] < kept[("megatron_ts", 2 * S)]
    if p > 1:
        dist.barrier(group=group)
    if rank == 0:
        import shutil

        shutil.rmtree(root)


CASES["profile-distributed"] = profile_distributed_case
ONLY_AT["profile-distributed"] = (2, 3)  # the profiler takes no other path at p = 1 or 4: an even and an odd p


# --- calibrate and validate-run: the whole measure -> fit -> plan -> train -> compare loop ------------------

def calibrate_validate_case(rank: int, p: int, group) -> None:
    """`paradyse-lab calibrate` then `paradyse-lab validate-run` at a tiny size, inside this process group
    (what their launcher runs on every rank): the files and their structure, not the speed. p = 2 only
    (the benchmark's world size; the loop costs seconds)."""
    import json
    import os
    import time
    from unittest import mock

    import torch.distributed as dist

    from paradyse_lab.app.measure import kernel_bench
    from paradyse_lab.app.measure.calibrate import calibrate
    from paradyse_lab.app.measure.calibrate_options import CalibrateOptions, profile_options
    from paradyse_lab.app.validate_run import POLICIES, ValidateOptions, execute_policies
    from paradyse_lab.cli.validate_run_command import finish
    from paradyse_lab.cluster.files import load_cluster_toml
    from paradyse_lab.cluster.spec import COLLECTIVES
    from paradyse_lab.costmodel.profiles import read_profiles

    root = _shared_tmpdir(rank, p, group)
    model = os.path.join(root, "tiny.json")  # one layer, h = 32: the loop's structure at the least cost
    if rank == 0:
        with open(model, "w") as f:
            json.dump({"model_type": "gpt2", "n_embd": 32, "n_head": 4, "n_layer": 1, "vocab_size": 64,
                       "n_positions": 16, "torch_dtype": "float32"}, f)
    dist.barrier(group=group)
    opts = CalibrateOptions(out=root, nproc=p, model=model, max_len=16, budget_s=3600.0, lengths=2,
                            repeats=1, warmup=0)  # a budget no stage reaches at this size, on a loaded machine too
    with mock.patch.object(kernel_bench, "TARGET_SCALE", 0.0):  # each timing at its fewest repeats: what is
        state = calibrate(opts, group, progress=False)  # written is the subject, not how precisely it is timed
    if rank == 0:
        cl = load_cluster_toml(os.path.join(root, "cluster.toml"))
        assert cl.gpus == 2 and cl.source.startswith("measured")
        assert set(cl.alpha_by_op_s) == set(COLLECTIVES) and all(v > 0 for v in cl.busbw_bytes_per_s.values())
        assert all(0 < e <= 1 for _, e in cl.gemm_efficiency + cl.attention_efficiency_causal)
        # the analytic model's step terms: launch cost, overlap, and the runtime's counts for this model at p
        assert cl.launch_s > 0 and cl.runtime_launch_s > 0 and 0 <= cl.comm_overlap <= 1 and cl.counted_model == "tiny"
        assert cl.epilogue_s > 0 and "collective_sync_us = " in open(os.path.join(root, "cluster.toml")).read()
        assert set(cl.step_counts) == {f"{o}.{k}" for o in profile_options(True) for k in ("attention", "mlp")} | {
            "fixed", "optimizer"}
        assert all(c[0] > 0 for c in cl.step_counts.values())
        df = read_profiles(os.path.join(root, "profile.csv"))
        assert set(df["source"]) == {"measured-distributed"} and (df["p"] == 2).all()
        got = {(s + ("+recompute" if r else ""), n) for s, r, n in zip(df["strategy"], df["recompute"], df["seq_len"])}
        assert state["lengths"] == [4, 16]
        assert got == {(o, n) for o in profile_options(True) for n in (4, 16)}, got
        assert state["done"] == ["collectives", "kernels", "profile", "replay"] and not state["skipped"]
        _assert_replay_tables_price_the_traced_layer(os.path.join(root, "kernels"), model, cl)
    t0 = time.perf_counter()
    calibrate(opts, group, progress=False)  # resumed: every stage and point is already there
    assert time.perf_counter() - t0 < 2.0
    if rank == 0:
        assert len(read_profiles(os.path.join(root, "profile.csv"))) == 16
    vopts = ValidateOptions(out=root, nproc=p, model=model, dataset="uniform:4:16", steps=2, max_len=16,
                            cluster=os.path.join(root, "cluster.toml"), cost_model="analytic", profiles="")
    execute_policies(vopts, group=group)
    if rank == 0:
        result = json.loads(json.dumps(finish(vopts, 1, formats=("png",))))  # what --format json prints (the
        # figure as PNG only: the PDF of the same figure costs 0.3 CPU s, the figures' own tests write both)
        assert set(result["policies"]) == set(POLICIES)
        for m in result["policies"].values():
            assert m["measured_total_s"] > 0 and m["predicted_total_s"] > 0 and m["step_mape"] >= 0
            assert m["steps"] == 1 and m["repeats"] == 1 and m["plans_match"] and m["spread"] == 0
            assert m["measured_min_total_s"] == m["measured_max_total_s"] == m["measured_total_s"]  # one run
        assert sorted(result["ranking"]["measured"]) == sorted(POLICIES)
        assert set(result["speedup_over_best_static"]) == {"dynamic:heuristic", "dynamic:dp"}
        assert result["cost_model"] == "analytic" and result["cluster"].endswith("cluster.toml")
        assert os.path.getsize(os.path.join(root, "figures", "validate_run.png")) > 0
        assert set(read_profiles(os.path.join(root, "profile.csv"))["model"]) == {model}
    if p > 1:
        dist.barrier(group=group)
    if rank == 0:
        import shutil

        shutil.rmtree(root)


def _assert_replay_tables_price_the_traced_layer(folder: str, model: str, cluster) -> None:
    """calibrate's DIR/kernels/: the replay model reads them, they hold every GEMM the runtime's trace issues for
    the model at p = 2 under every strategy, and they price its traced layer serially with the measured
    dispatch cost (the CPU's host runs the kernels)."""
    import dataclasses

    from paradyse_lab.app.measure.replay_tables import read_rows
    from paradyse_lab.app.replay_traces import SublayerTraces
    from paradyse_lab.core.model_spec import get_model
    from paradyse_lab.core.strategies import StrategyOption
    from paradyse_lab.costmodel.replay.price import critical_path, measured_prices
    from paradyse_lab.costmodel.replay.tables import KernelTables
    from paradyse_lab.runtime.model.parallel_gpt import STRATEGY_MODULES

    tables = KernelTables.read(folder)
    prices = measured_prices(tables, cluster)
    assert prices.serial and prices.dispatch_s > 0 and tables.elementwise is not None
    measured = {(int(r["m"]), int(r["n"]), int(r["k"])) for r in read_rows(f"{folder}/gemm.csv")}
    traces = SublayerTraces(dataclasses.replace(get_model(model), dtype="fp32"), 2, "cpu")
    for name in STRATEGY_MODULES:
        ops = traces.trace("attention", StrategyOption(name), 16) + traces.trace("mlp", StrategyOption(name), 16)
        assert {(o.m, o.n, o.k) for o in ops if o.kind == "gemm"} <= measured, name
        step = critical_path(ops, prices)
        assert step.time_s > max(step.host_s, step.kernel_s) > 0


CASES["calibrate-validate-loop"] = calibrate_validate_case
ONLY_AT["calibrate-validate-loop"] = (2,)


# --- Hugging Face weights in and out, checkpoints resharded (weights_cases.py) -------------------------------

CASES.update(weights_cases.CASES)
ONLY_AT.update(weights_cases.ONLY_AT)
CASES.update(optim_cases.CASES)
ONLY_AT.update(optim_cases.ONLY_AT)
CASES.update(grad_reduce_cases.CASES)
ONLY_AT.update(grad_reduce_cases.ONLY_AT)


# --- grouped steps: a global batch over groups of ranks, states in one world layout (grouped_cases.py) ------

import grouped_cases  # noqa: E402 - it reads this module's helpers, defined above

CASES.update(grouped_cases.CASES)
ONLY_AT.update(grouped_cases.ONLY_AT)

import planned_groups_cases  # noqa: E402 - grouped steps sized by the group planner

CASES.update(planned_groups_cases.CASES)
ONLY_AT.update(planned_groups_cases.ONLY_AT)

import node_cases  # noqa: E402 - a world of two nodes (calibrate's inter-node link)

CASES.update(node_cases.CASES)
ONLY_AT.update(node_cases.ONLY_AT)

import head_chunk_cases  # noqa: E402 - head-chunked attention (`+headchunk`), reads this module's helpers

CASES.update(head_chunk_cases.CASES)
ONLY_AT.update(head_chunk_cases.ONLY_AT)

import round_cases  # noqa: E402 - a step as rounds of group splits, reduced once

CASES.update(round_cases.CASES)
ONLY_AT.update(round_cases.ONLY_AT)

import ulysses_ring_cases  # noqa: E402 - Ulysses x ring at p = 4, on this module's helpers

CASES.update(ulysses_ring_cases.CASES)
ONLY_AT.update(ulysses_ring_cases.ONLY_AT)

import megatron_cp_cases  # noqa: E402 - tensor x context parallel at p = 4, on this module's helpers

CASES.update(megatron_cp_cases.CASES)
ONLY_AT.update(megatron_cp_cases.ONLY_AT)

import ulysses_uneven_cases  # noqa: E402 - Ulysses with uneven heads at p = 4, on this module's helpers

CASES.update(ulysses_uneven_cases.CASES)
ONLY_AT.update(ulysses_uneven_cases.ONLY_AT)

import subworld_cases  # noqa: E402 - the strategies' subgroups inside groups smaller than the world

CASES.update(subworld_cases.CASES)
ONLY_AT.update(subworld_cases.ONLY_AT)
