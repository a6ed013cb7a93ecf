"""Hugging Face models in: small random transformers GPT-2, LLaMA, Mistral and Qwen2 models (built locally, no
download) converted to the runtime, whose logits equal transformers' and whose gradients and bytes equal the
single-device reference's; the configurations the conversion refuses.
"""

from __future__ import annotations

import dataclasses

import torch
from reference_checks import (
    STRATEGIES,
    TOL,
    B,
    S,
    _check_model,
    feasible,
    llama_config,
    llama_plans,
)
from torch.testing import assert_close

from paradyse_lab.core.model_spec import spec_from_hf
from paradyse_lab.core.strategies import get_strategy
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime import ParallelGPT, gather_sequence, shard_sequence
from paradyse_lab.runtime.hf.convert import hf_to_state_dict
from paradyse_lab.runtime.model.reference import ReferenceGPT


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


LLAMA_KV_HEADS = (1, 2, 12)

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


CASES = {}
ONLY_AT: dict[str, tuple[int, ...]] = {}

for _kv in LLAMA_KV_HEADS:
    CASES[f"llama-hf-logits-and-grads-kv{_kv}"] = llama_hf_case(_kv)
    ONLY_AT[f"llama-hf-logits-and-grads-kv{_kv}"] = (2, 4) if _kv == 12 else (2,)  # p = 3 (no transformers
    # import in that world, 6 s a rank): its uneven K/V split is checked against the reference by
    # llama-kv1-ts-metp-mlps-causal; p = 1: the conversion is the one p = 2 and 4 check, and the unsharded model
    # against the reference is llama-tiled-offload's; p = 4: the conversion against transformers under every
    # strategy with 12 K/V heads (the 1 and 2 K/V heads fewer than 4 ranks, replicated, against the reference in
    # llama-kv1-ts-metp-mlps-bidir, usp-llama-kv1-gqa, usp-llama-kv2-gqa and headchunk-llama-kv2-*)
CASES["llama-hf-variants"] = llama_variants_hf_case
ONLY_AT["llama-hf-variants"] = (2,)  # the other flags' conversions; every strategy at p = 2
CASES["llama-from-hf-refusals"] = llama_from_hf_refusals_case

ONLY_AT["llama-from-hf-refusals"] = (1,)  # config parsing, no ranks involved

CASES["hf-gpt2-logits"] = hf_case
ONLY_AT["hf-gpt2-logits"] = (2,)  # the conversion does not depend on p; sharding is checked by model-* at every p
