"""The whole model under plans that mix strategies and techniques (recompute, tiled MLP and loss, offload),
GPT-2- and LLaMA-shaped, against the single-device reference: logits, loss, every gradient, every sub-layer's bytes;
and the model's input errors.
"""

from __future__ import annotations

import dataclasses

import torch
from reference_checks import (
    MODEL_LAYERS,
    STRATEGIES,
    TILE,
    S,
    _check_model,
    config,
    feasible,
    llama_config,
    reference,
    reference_and_model,
)

from paradyse_lab.core.strategies import get_strategy
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime import ParallelGPT, shard_sequence


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

for _causal in (True, False):
    CASES[f"llama-kv1-ts-metp-mlps-{'causal' if _causal else 'bidir'}"] = llama_gqa_mlp_case(_causal)
ONLY_AT["llama-kv1-ts-metp-mlps-bidir"] = (4,)  # a LLaMA without the mask, where one K/V head is fewest per rank
ONLY_AT["llama-kv1-ts-metp-mlps-causal"] = (1, 2, 3)  # p = 4: the same plans bidirectional (-bidir above; the mask
# is the attention's, checked at p = 4 by model-*-causal), the tiled loss by tiled-loss-5-mixed-causal

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
        CASES[f"model-{_strategy}-{_tag}"] = model_case([[_strategy] * MODEL_LAYERS], _causal)  # one strategy
        ONLY_AT[f"model-{_strategy}-{_tag}"] = (4,)  # throughout at p = 4 (one case per 1-D strategy there); p = 1,
        # 2 and 3: every strategy in the mixed plans below
# causal: one name per sub-layer, then one strategy by sub-layer with recompute on its MLPs alone, and one by layer
# throughout (plans that never switch strategy); bidirectional: the 16 (strategy, recompute, kind) sub-layers by layer
CASES["model-mixed-switching-causal"] = model_case([*SWITCHING_PLANS, ["metp", "metp+recompute"] * MODEL_LAYERS,
                                                    ["megatron_cz", "megatron_cz"]], True)
ONLY_AT["model-mixed-switching-causal"] = (1, 2, 3)  # p = 4: each strategy throughout (model-*-causal above), and
# plans switching between megatron_ts (also +recompute), megatron_cz (also +recompute), ulysses_z and metp among
# the 2-D strategies in usp-model-switching-causal and tpcp-model-switching-causal
CASES["model-mixed-switching-bidir"] = model_case(_per_layer(SWITCHING_PLANS[:2]), False)
ONLY_AT["model-mixed-switching-bidir"] = (1, 3)  # p = 2: every strategy's bidirectional attention, with and
# without recompute, against the reference in sublayer-*-attention-bidir*; the switching at p = 2: the causal plans;
# p = 4: bidirectional whole models in usp-/tpcp-model-per-layer-bidir and llama-kv1-ts-metp-mlps-bidir
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
ONLY_AT["model-tiled-offload-mixed-causal"] = (1, 3)  # p = 2 and 4: every strategy's tiled, offloaded MLP and
# offloaded attention in sublayer-*-tiled-offload / -offload (every p), the switching in model-mixed-switching-causal
# (p = 2) and usp-/tpcp-model-switching-causal (p = 4, with +tiled and +offload sub-layers)
CASES["model-tiled-alst-chunks-causal"] = model_case([  # ALST's rule: ceil(positions / hidden) chunks (one here)
    ["metp+tiled", "megatron_cz+tiled+offload", "ulysses_z+recompute+tiled", "megatron_ts+tiled"],
], layers=None)
ONLY_AT["model-tiled-alst-chunks-causal"] = (1,)  # the default chunk size; exactness at every p: the case above
CASES["llama-tiled-offload"] = llama_techniques_case
ONLY_AT["llama-tiled-offload"] = (1, 2, 3)  # p = 4 runs only megatron_cz and ulysses_z on its 2 K/V heads: the LLaMA
# with 2 K/V heads under ulysses_z+tiled and +recompute+offload in usp-llama-kv2-gqa, the techniques' bytes in
# sublayer-*-tiled-offload / -offload

CASES["bad-input"] = bad_input_case
