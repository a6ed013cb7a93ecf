"""Single-process runtime tests: layout maths, weight shards, attention kernels, the merge, plan checks.

Run: `python -m pytest -q tests/runtime/test_local.py`.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from paradyse_lab.core.model_spec import ModelSpec, spec_from_hf
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime import ParallelGPT, ReferenceGPT
from paradyse_lab.runtime.attention.kernels import _math_forward, attention_backward, attention_forward, merge_partials
from paradyse_lab.runtime.model.layout import (
    check_length,
    gathered_positions,
    layout_unit,
    local_positions,
    natural_order,
)
from paradyse_lab.runtime.model.reference import init_state_dict
from paradyse_lab.runtime.model.sublayer import Impl
from paradyse_lab.runtime.model.weight_shards import shard_state_dict, shard_sublayer, unshard_sublayer
from paradyse_lab.runtime.strategies.flat_shards import pack_rows, pack_shard, unpack_gathered, unpack_gathered_rows


@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_zigzag_chunks_partition_the_sequence(p):
    s = 48
    parts = [local_positions(s, p, r) for r in range(p)]
    assert sorted(torch.cat(parts).tolist()) == list(range(s))
    for part in parts:
        assert len(part) == s // p and torch.all(part[1:] > part[:-1])  # increasing: causal on local order
    if p > 1:
        c = s // (2 * p)
        assert parts[0][:c].tolist() == list(range(c)) and parts[0][-1] == s - 1  # chunks 0 and 2p-1
    assert torch.equal(gathered_positions(s, p)[natural_order(s, p)], torch.arange(s))


def test_length_must_split_into_zigzag_unit():
    assert layout_unit(1) == 1 and layout_unit(3) == 6
    check_length(7, 1)
    with pytest.raises(UserInputError, match="multiple of 6"):
        check_length(9, 3)


@pytest.mark.parametrize("kind", ["attention", "mlp"])
@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_weight_shards_round_trip(kind, p):
    h, f = 24, 96
    n1 = 3 * h if kind == "attention" else f
    n2 = h if kind == "attention" else f
    full = {"ln_w": torch.randn(h), "ln_b": torch.randn(h), "w1": torch.randn(n1, h), "b1": torch.randn(n1),
            "w2": torch.randn(n2, h), "b2": torch.randn(h)}
    shards = [shard_sublayer(full, kind, r, p) for r in range(p)]
    assert shards[0]["w1"].shape == (n1 // p, h) and shards[0]["w2"].shape == (n2 // p, h)
    back = unshard_sublayer(shards, kind)
    for name, value in full.items():
        assert torch.equal(back[name], value)
    flat = torch.cat([pack_shard(s["w1"], s["b1"], s["w2"]) for s in shards])
    w1, b1, w2 = unpack_gathered(flat, p, n1 // p, h)
    for name, gathered in (("w1", w1), ("b1", b1), ("w2", w2)):  # rank r's rows: its shard (what it reduce-scatters)
        assert all(torch.equal(rows, s[name]) for rows, s in zip(gathered.chunk(p), shards))
    if kind == "mlp":  # the ZeRO-3 gather of the MLP is the natural matrix
        assert torch.equal(w1, full["w1"]) and torch.equal(w2, full["w2"])


@pytest.mark.parametrize("kv_heads", [1, 2, 12])
@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_llama_weight_shards_round_trip(p, kv_heads):
    """GQA attention (q | k | v rows, K/V heads split by rows when kv_heads < p) and SwiGLU (gate | up) without
    biases: shards round-trip, and a ZeRO-3 gather read by `split_sections` is the natural q, k, v / gate, up."""
    from paradyse_lab.runtime.strategies.flat_shards import split_sections

    h, d, f = 144, 12, 96
    kv = kv_heads * d
    for kind, sections in (("attention", (h, kv, kv)), ("mlp", (f, f))):
        n1, n2 = sum(sections), (h if kind == "attention" else f)
        full = {"ln_w": torch.randn(h), "ln_b": torch.zeros(0), "w1": torch.randn(n1, h), "b1": torch.zeros(0),
                "w2": torch.randn(n2, h), "b2": torch.zeros(0)}
        shards = [shard_sublayer(full, kind, r, p) for r in range(p)]
        assert shards[0]["w1"].shape == (n1 // p, h) and shards[0]["b1"].numel() == 0
        back = unshard_sublayer(shards, kind)
        assert all(torch.equal(back[name], value) for name, value in full.items())
        if kind == "attention" and kv_heads % p == 0:  # rank 1's K rows: its whole K/V heads
            r, kp = min(1, p - 1), kv // p
            assert torch.equal(shards[r]["w1"][h // p:h // p + kp], full["w1"][h + r * kp:h + (r + 1) * kp])
        flat = torch.cat([pack_shard(s["w1"], s["b1"], s["w2"]) for s in shards])
        w1, b1, w2 = unpack_gathered(flat, p, n1 // p, h, 0)
        assert torch.equal(w2, full["w2"]) and b1.numel() == 0
        assert all(torch.equal(rows, s["w1"]) for rows, s in zip(w1.chunk(p), shards))
        rows = unpack_gathered_rows(torch.cat([pack_rows(s["w1"], s["w2"]) for s in shards]), p, n1 // p)
        assert torch.equal(rows[0], w1) and torch.equal(rows[1], w2)  # the bias-free gather ZeRO-3 runs
        parts = split_sections(w1.t(), sections, p)  # the gathered GEMM's output features, per section
        assert all(torch.equal(part.t(), want) for part, want in zip(parts, full["w1"].split(list(sections))))


def _reference_attention(q, k, v, causal):
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


@pytest.mark.parametrize("causal", [True, False])
def test_math_kernel_forward_backward_and_lse(causal):
    gen = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(2, 3, 10, 8, generator=gen, dtype=torch.float64) for _ in range(4))
    out, lse = attention_forward(q, k, v, causal)
    qr, kr, vr = (x.clone().requires_grad_() for x in (q, k, v))
    want, want_lse = _reference_attention(qr, kr, vr, causal)
    want.backward(do)
    assert_close(out, want.detach().to(out.dtype))
    assert_close(lse, want_lse.detach())
    for got, ref in zip(attention_backward(do, q, k, v, out, lse, causal), (qr.grad, kr.grad, vr.grad)):
        assert_close(got, ref)


def test_merge_of_partials_equals_attention_over_all_keys():
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=gen) * 8 for _ in range(3))  # large logits: stability
    full, full_lse = _math_forward(q, k, v, False, 0.5)
    out, lse = torch.zeros_like(q), torch.full(q.shape[:3], float("-inf"))
    for ks in (slice(0, 2), slice(2, 6)):
        o_b, l_b = _math_forward(q, k[:, :, ks], v[:, :, ks], False, 0.5)
        merge_partials(out, lse, o_b, l_b)
    assert_close(out, full)
    assert_close(lse, full_lse)


def _single_process_pair(seed: int):
    """(ParallelGPT on one process, ReferenceGPT, the state dict both hold) of a tiny 2-layer GPT."""
    cfg = ModelSpec(vocab_size=64, max_positions=16, hidden=24, heads=4, layers=2, name="runtime")
    sd = init_state_dict(cfg, seed)
    ref = ReferenceGPT(cfg)
    ref.load_state_dict(sd)
    return ParallelGPT(cfg, state_dict=sd), ref, sd


def test_single_process_model_matches_reference_and_state_dict_shards():
    model, ref, sd = _single_process_pair(3)
    ids = torch.randint(0, 64, (2, 12))
    assert_close(model(ids, ["metp", "megatron_ts+recompute"]), ref(ids))
    assert set(shard_state_dict(sd, 1, 2)) == set(sd)
    for key, value in model.full_state_dict().items():
        assert torch.equal(value, sd[key])


def test_one_rank_runs_any_length_under_every_strategy():
    """The layout unit at p = 1 is 1 (paradyse_lab.core.strategies.layout_unit): an odd length runs, ring ones
    included."""
    from paradyse_lab.core.strategies import USABLE

    model, ref, _ = _single_process_pair(5)
    ids = torch.randint(0, 64, (1, 13))
    assert_close(model(ids, list(USABLE)), ref(ids))  # one strategy per sub-layer


def test_runtime_modules_are_the_usable_catalog_entries():
    from paradyse_lab.core.strategies import CATALOG, USABLE
    from paradyse_lab.runtime.model.parallel_gpt import STRATEGY_MODULES

    assert tuple(STRATEGY_MODULES) == USABLE
    for name, module in STRATEGY_MODULES.items():
        assert module.__name__ == CATALOG[name].runtime_module
        assert module.ATTENTION.name == name and isinstance(module.MLP, Impl)


def test_plan_errors_name_the_problem():
    cfg = ModelSpec(vocab_size=64, max_positions=16, hidden=24, heads=4, layers=2, name="runtime")
    model = ParallelGPT(cfg)
    ids = torch.zeros(1, 8, dtype=torch.long)
    with pytest.raises(UserInputError, match="plan has 1 entries but the model has 2 layers"):
        model(ids, ["metp"])
    with pytest.raises(UserInputError, match="unknown strategy"):
        model(ids, ["metp", "tp"])
    with pytest.raises(UserInputError, match="no runtime implementation"):
        model(ids, ["metp", "colossal_z"])
    with pytest.raises(UserInputError, match="max_positions"):
        model(torch.zeros(1, 32, dtype=torch.long), ["metp", "metp"])


def test_train_command_reports_bad_input_without_a_traceback(capsys):
    from paradyse_lab.cli.train_command import main

    assert main(["--model", "gpt2-tiny", "--dataset", "nope", "--steps", "2", "--no-progress"]) == 2
    assert "unknown workload 'nope'" in capsys.readouterr().err
    assert main(["--model", "bert", "--dataset", "uniform:512:1024", "--steps", "2", "--no-progress"]) == 2
    assert "embedding" in capsys.readouterr().err  # the paper's layer-stack presets have no embedding


def test_running_the_training_library_module_refuses_and_names_the_command(monkeypatch, capsys):
    """`python -m paradyse_lab.runtime.training.loop` used to be the command; run directly it must not exit 0 having
    done nothing
    (paradyse_lab/app/measure/profiler.py and calibrate.py end with the same block). Run in this process as
    `python -m` runs it (runpy, as `__main__`): the block is the module's, not the interpreter's."""
    import runpy
    import sys
    import warnings

    monkeypatch.setattr(sys, "argv", ["paradyse_lab.runtime.training.loop", "--steps", "1"])
    with warnings.catch_warnings(), pytest.raises(SystemExit) as done:
        warnings.simplefilter("ignore", RuntimeWarning)  # imported already: runpy says so
        runpy.run_module("paradyse_lab.runtime.training.loop", run_name="__main__")
    assert done.value.code == 2
    assert "paradyse-lab train" in capsys.readouterr().err


def test_config_json_builds_the_model_from_hf_builds(tmp_path):
    """`train --model config.json` (load_hf_config) builds the model that the runtime's Hugging Face path
    (spec_from_hf) builds from the same config, norm epsilon included (Qwen2's 1e-6): one reading of a config."""
    import dataclasses
    import json

    from paradyse_lab.core.model_spec import load_hf_config

    cfg = {"model_type": "qwen2", "hidden_size": 96, "num_attention_heads": 8, "num_key_value_heads": 2,
           "num_hidden_layers": 2, "intermediate_size": 192, "vocab_size": 100, "max_position_embeddings": 64,
           "rms_norm_eps": 1e-6, "rope_theta": 1e6, "tie_word_embeddings": True}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    from_spec = load_hf_config(path)
    assert dataclasses.replace(from_spec, name="hf") == spec_from_hf(cfg) and from_spec.rope
    assert from_spec.norm_eps == 1e-6


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_grouped_query_attention_makes_no_full_heads_copy_of_k_or_v(kv_heads):
    """K and V with fewer heads than q (6): forward and backward equal attention over K/V heads repeated per
    group (query head i reads K/V head i // (6 / kv)), for a q that is a strided view (as split_heads gives),
    and no operation makes a [b, 6, sk, d] tensor: no full-heads copy of K or V, nor of dK or dV."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Shapes(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for x in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(x, torch.Tensor):
                    self.seen.add(tuple(x.shape))
            return out

    b, hh, sq, sk, d = 2, 6, 5, 7, 4
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(b, sq, hh * d, generator=gen, dtype=torch.float64).view(b, sq, hh, d).transpose(1, 2)
    k, v = (torch.randn(b, kv_heads, sk, d, generator=gen, dtype=torch.float64) for _ in range(2))
    do = torch.randn(b, hh, sq, d, generator=gen, dtype=torch.float64)
    for causal in (False, True):
        kk, vv = (k, v) if not causal else (k[:, :, :sq], v[:, :, :sq])  # causal blocks are square
        with Shapes() as shapes:
            out, lse = attention_forward(q, kk, vv, causal)
            grads = attention_backward(do, q, kk, vv, out, lse, causal)
        if not causal:
            assert (b, hh, sk, d) not in shapes.seen, "a full-heads copy of K, V, dK or dV"
        qr, kr, vr = (x.clone().requires_grad_() for x in (q, kk, vv))
        want, want_lse = _reference_attention(qr, *(x.repeat_interleave(hh // kv_heads, 1) for x in (kr, vr)), causal)
        want.backward(do)
        assert_close(out, want.detach())
        assert_close(lse, want_lse.detach())
        for got, ref in zip(grads, (qr.grad, kr.grad, vr.grad)):
            assert got.shape == ref.shape
            assert_close(got, ref)


def test_the_runtime_refuses_a_model_spec_it_cannot_build():
    """A layer-only spec (no embedding or head) and rotary embeddings on an odd head dimension are refused in
    one line naming what is missing, before any tensor is made."""
    from paradyse_lab.core.model_spec import PRESETS, ModelSpec

    with pytest.raises(UserInputError, match="needs an embedding and a head"):
        ReferenceGPT(PRESETS["bert"])
    with pytest.raises(UserInputError, match="even head dimension, got 3"):
        ParallelGPT(ModelSpec(name="odd", hidden=6, heads=2, layers=1, vocab_size=8))
