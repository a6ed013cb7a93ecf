"""GPU tests of the runtime: fused attention kernels against the exact math kernel, bf16 model tolerances,
and the strategies over NCCL when two or more GPUs are present. Skipped without CUDA (tests/conftest.py).

Run: `python -m pytest -q -m gpu tests/gpu`.
"""

from __future__ import annotations

import datetime
import os

import pytest

from paradyse_lab.core.model_spec import ModelSpec

pytestmark = pytest.mark.gpu
"""Every test imports torch itself: on a machine without CUDA (tests/conftest.py skips them all, telling it without
torch where no GPU device exists) collecting this module imports no torch (~2.3 CPU s)."""

BF16_TOL = {"rtol": 2e-2, "atol": 2e-2}
"""bf16 has 8 mantissa bits: about 0.4% per rounding; attention sums a few of them."""


def _fused_kernels():
    from paradyse_lab.runtime.attention import flash as flash_kernels
    from paradyse_lab.runtime.attention import kernels as attention

    kinds = ["sdpa_flash"] + (["flash_attn"] if flash_kernels._fa is not None else [])
    return [(k, attention._KERNELS[k]) for k in kinds]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", [(2, 4, 128, 64, 128, 4), (1, 2, 64, 32, 128, 2),
                                   (2, 8, 128, 64, 128, 2)])  # b, H, sq, d, sk, KV (the last: GQA, 4 per group)
def test_fused_kernels_match_math_in_bf16(causal, shape):
    import torch
    from torch.testing import assert_close

    from paradyse_lab.runtime.attention.kernels import _math_backward, _math_forward

    b, heads, sq, d, sk, kv = shape
    if causal and sq != sk:
        pytest.skip("causal blocks are square")
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, heads, sq, d, device="cuda", generator=gen).bfloat16()
    k, v = (torch.randn(b, kv, sk, d, device="cuda", generator=gen).bfloat16() for _ in range(2))
    do = torch.randn(b, heads, sq, d, device="cuda", generator=gen).bfloat16()
    scale = d ** -0.5
    want, want_lse = _math_forward(q.float(), k.float(), v.float(), causal, scale)
    want_grads = _math_backward(do.float(), q.float(), k.float(), v.float(), want, want_lse, causal, scale)
    for name, (fwd, bwd) in _fused_kernels():
        out, lse = fwd(q, k, v, causal, scale)
        assert_close(out.float(), want, **BF16_TOL, msg=lambda m, name=name: f"{name} out: {m}")
        assert_close(lse.float(), want_lse, rtol=1e-3, atol=1e-3, msg=lambda m, name=name: f"{name} lse: {m}")
        for got, ref in zip(bwd(do, q, k, v, out, lse, causal, scale), want_grads):
            assert_close(got.float(), ref, **BF16_TOL, msg=lambda m, name=name: f"{name} grad: {m}")


@pytest.mark.parametrize("shape", ["gpt2", "llama"])
def test_single_gpu_model_bf16_close_to_fp32_reference(shape):
    import torch
    from torch.testing import assert_close

    from paradyse_lab.runtime import ParallelGPT, ReferenceGPT
    from paradyse_lab.runtime.model.reference import init_state_dict

    cfg = ModelSpec(vocab_size=512, max_positions=256, hidden=256, heads=4, layers=2, name="runtime")
    if shape == "llama":  # RMSNorm, SwiGLU, rotary embeddings, 2 K/V heads (GQA in the fused kernels), untied
        cfg = ModelSpec(vocab_size=512, max_positions=256, hidden=256, heads=4, layers=2, ffn_hidden=512,
                        kv_heads=2, norm="rmsnorm", ffn_kind="swiglu", bias=False, rope_theta=10000.0, tied=False,
                        name="runtime")
    sd = init_state_dict(cfg, 0)
    ref = ReferenceGPT(cfg).cuda()
    ref.load_state_dict(sd)
    model = ParallelGPT(cfg, state_dict=sd).cuda().to(torch.bfloat16)
    ids = torch.randint(0, 512, (2, 256), device="cuda")
    labels = torch.randint(0, 512, (2, 256), device="cuda")
    _, loss_ref = ref(ids, labels)
    for plan in (["megatron_ts", "metp"], ["ulysses_z+recompute", "megatron_cz"]):
        logits, loss = model(ids, plan, labels)
        loss.backward()
        assert_close(loss.float(), loss_ref.float(), rtol=2e-2, atol=2e-2)
        assert all(q.grad is None or torch.isfinite(q.grad).all() for q in model.parameters())
        model.zero_grad()


@pytest.mark.parametrize("causal", [True, False])
def test_varlen_kernels_match_the_per_document_math_kernel_in_bf16_with_gqa(causal):
    """flash-attn's varlen functions (when installed) and PyTorch's flash kernel with cumulative lengths give
    the exact per-document kernel's output, lse and gradients, GQA's K/V heads as they are, empty documents
    included (their rows: out 0, lse -inf)."""
    import torch
    from torch.testing import assert_close

    from paradyse_lab.runtime.attention import varlen

    gen = torch.Generator(device="cuda").manual_seed(1)
    cu = (0, 1, 64, 64, 200, 256)  # a one-token and an empty document
    q, do = (torch.randn(2, 8, 256, 64, device="cuda", generator=gen).bfloat16() for _ in range(2))
    k, v = (torch.randn(2, 2, 256, 64, device="cuda", generator=gen).bfloat16() for _ in range(2))
    want, want_lse = varlen._math_varlen_forward(q.float(), k.float(), v.float(), cu, cu, causal, 0.125)
    want_grads = varlen._math_varlen_backward(do.float(), q.float(), k.float(), v.float(), want, want_lse, cu, cu,
                                              causal, 0.125)
    names = ["sdpa_flash"] + (["flash_attn"] if varlen.flash_kernels._fa is not None else [])
    for name in names:
        _, fwd, bwd = varlen.KERNELS[name]
        out, lse = fwd(q, k, v, cu, cu, causal, 0.125)
        assert_close(out.float(), want, **BF16_TOL, msg=lambda m, name=name: f"{name} out: {m}")
        assert_close(lse.float(), want_lse.float(), rtol=1e-3, atol=1e-3, msg=lambda m, name=name: f"{name} lse: {m}")
        for got, ref in zip(bwd(do, q, k, v, out, lse, cu, cu, causal, 0.125), want_grads):
            assert_close(got.float(), ref, **BF16_TOL, msg=lambda m, name=name: f"{name} grad: {m}")


@pytest.mark.parametrize("shape", ["gpt2", "llama"])
def test_packed_step_on_one_gpu_runs_varlen_kernels_and_matches_the_reference(shape):
    """A packed step on CUDA runs the fused varlen kernels, never the masked math kernel (no warning, the
    train log's `attention_kernel` names them), and its bf16 loss is close to the fp32 reference's with the
    block-diagonal mask; LLaMA-shaped: GQA (2 K/V heads for 4) and rotary embeddings by document position."""
    import warnings

    import torch
    from torch.testing import assert_close

    from paradyse_lab.runtime import ParallelGPT, ReferenceGPT
    from paradyse_lab.runtime.attention import kernels as attention
    from paradyse_lab.runtime.model.packed import cu_seqlens, pack_labels, pack_sequence
    from paradyse_lab.runtime.model.reference import init_state_dict

    cfg = ModelSpec(vocab_size=512, max_positions=256, hidden=256, heads=4, layers=2, name="runtime")
    if shape == "llama":
        cfg = ModelSpec(vocab_size=512, max_positions=256, hidden=256, heads=4, layers=2, ffn_hidden=512,
                        kv_heads=2, norm="rmsnorm", ffn_kind="swiglu", bias=False, rope_theta=10000.0, tied=False,
                        name="runtime")
    sd = init_state_dict(cfg, 0)
    ref = ReferenceGPT(cfg).cuda()
    ref.load_state_dict(sd)
    model = ParallelGPT(cfg, state_dict=sd).cuda().to(torch.bfloat16)
    pack = pack_sequence([1, 100, 37, 118], 1)
    ids = torch.randint(0, 512, (1, pack.padded_len), device="cuda")
    labels, cu = pack_labels(pack, ids), cu_seqlens(pack)
    _, loss_ref = ref(ids, labels, cu)
    attention._WARNED_MASKED.clear()
    with warnings.catch_warnings(), attention.kernels_used() as ran:
        warnings.simplefilter("error", RuntimeWarning)
        _, loss = model(ids, ["megatron_ts", "metp"], labels, cu_seqlens=cu)
        loss.backward()
    assert ran and ran <= {"sdpa_flash_varlen", "flash_attn_varlen"}
    assert_close(loss.float(), loss_ref.float(), rtol=2e-2, atol=2e-2)
    assert all(torch.isfinite(q.grad).all() for q in model.parameters() if q.numel())


def _nccl_worker(rank: int, p: int, port: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.testing import assert_close

    from paradyse_lab.runtime import ParallelGPT, ReferenceGPT, gather_sequence, shard_sequence
    from paradyse_lab.runtime.model.packed import cu_seqlens, pack_sequence
    from paradyse_lab.runtime.model.reference import init_state_dict

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=p, timeout=datetime.timedelta(seconds=120))
    try:
        cfg = ModelSpec(vocab_size=512, max_positions=96, hidden=96, heads=12, layers=4, name="runtime")
        sd = init_state_dict(cfg, 0)
        ref = ReferenceGPT(cfg).cuda()
        ref.load_state_dict(sd)
        model = ParallelGPT(cfg, state_dict=sd).cuda()  # fp32: exact math kernel, NCCL collectives
        ids = torch.randint(0, 512, (2, 96), generator=torch.Generator().manual_seed(1)).cuda()
        want = ref(ids)
        for plan in (["megatron_ts", "megatron_cz", "ulysses_z", "metp"],
                     ["metp+recompute", "megatron_cz+recompute", "megatron_ts", "ulysses_z"]):
            logits = model(shard_sequence(ids, 1), plan)
            logits.float().pow(2).mean().backward()
            assert_close(gather_sequence(logits.detach(), 1), want.detach(), rtol=1e-4, atol=1e-4)
            model.zero_grad()
        pack = pack_sequence([5, 40, 33], p)  # each document padded to 2p by its own padding segment
        cu = cu_seqlens(pack)
        ids = ids[:, :pack.padded_len]
        want = ref(ids, cu_seqlens=cu)  # block-diagonal over the documents and paddings
        for plan in (["megatron_cz", "metp+recompute", "ulysses_z", "megatron_ts"],):
            logits = model(shard_sequence(ids, 1, None, cu), plan, cu_seqlens=cu)
            logits.float().pow(2).mean().backward()
            assert_close(gather_sequence(logits.detach(), 1, None, cu), want.detach(), rtol=1e-4, atol=1e-4)
            model.zero_grad()
    finally:
        dist.destroy_process_group()


def test_strategies_over_nccl():
    import socket

    import torch
    import torch.multiprocessing as mp

    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = min(4, torch.cuda.device_count())
    mp.spawn(_nccl_worker, args=(p, port), nprocs=p)


def test_training_on_one_gpu_in_bf16_lowers_the_loss(tmp_path):
    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import train

    opts = TrainOptions(model="gpt2-tiny", dataset="uniform:512:1024", steps=30, max_len=256, progress=False,
                        checkpoint_dir=str(tmp_path), checkpoint_every=15)
    log = train(opts)
    assert log[-1]["peak_bytes"] > 0
    assert sum(r["loss"] for r in log[-5:]) < sum(r["loss"] for r in log[:5]) - 2.5  # 0.5 per step on average
    assert (tmp_path / "step-000030" / "meta.json").exists()  # a torch.distributed.checkpoint folder
    assert any(f.suffix == ".distcp" for f in (tmp_path / "step-000030").iterdir())


@pytest.mark.parametrize("head", ["whole", "tiled", "vocab"])
def test_head_peak_in_bf16_is_the_cost_models_kept_plus_transient(head):
    """The head and loss in bf16 on CUDA hold what the cost model counts (tests/runtime/test_head_memory.py
    checks fp32 on CPU, where bf16 softmax kernels copy the logits to fp32 first)."""
    import sys
    from pathlib import Path

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
    from head_memory_cases import head_case

    step, lower, upper = head_case("bf16", head, "cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    measured = torch.cuda.max_memory_allocated() - start
    assert lower <= measured <= upper, (measured, lower, upper)


def test_profile_peak_holds_the_model_states_and_does_not_grow_between_rows():
    """On CUDA: the profile's peak counts every model state (16 bytes per parameter) and the kept activations,
    the fused kernel that ran is named, and profiling the same row twice gives the same peak (nothing of the
    kept-bytes forward survives the reset: paradyse_lab/app/measure/profile_memory.py `reset_peak`)."""
    from types import SimpleNamespace

    from paradyse_lab.app.measure import profiler
    from paradyse_lab.cli.profile_command import parse_options

    args = SimpleNamespace(model="gpt2-tiny", seqs="256,256", strategies="megatron_cz", mode="rank-local", p=2,
                           rank=0, batch=1, layers=2, warmup=1, repeats=1, device="cuda", dtype="bf16", cluster="",
                           seed=0)
    df = profiler.profile(parse_options(args), progress=False)
    assert set(df["attention_kernel"]) <= {"sdpa_flash", "flash_attn"}
    assert (df["peak_bytes"] >= df["state_bytes"] + df["kept_bytes"]).all()
    assert df["peak_bytes"].iloc[0] == df["peak_bytes"].iloc[1]


def test_tiled_mlp_and_offload_on_one_gpu():
    """On CUDA: plans with the tiled MLP and offload (pinned host copies on a side stream) give the loss and
    gradients of the same plan without them, move the schedule's host bytes, and the forward leaves on the
    device none of what it offloaded (runtime/strategies/offload.py)."""
    import torch
    from torch.testing import assert_close

    from paradyse_lab.core.strategies import StrategyOption
    from paradyse_lab.costmodel.schedules import schedule
    from paradyse_lab.runtime import ParallelGPT
    from paradyse_lab.runtime.model.reference import init_state_dict

    cfg = ModelSpec(vocab_size=512, max_positions=1024, hidden=256, heads=4, layers=2, ffn_hidden=512, kv_heads=2,
                    norm="rmsnorm", ffn_kind="swiglu", bias=False, rope_theta=10000.0, tied=False, name="runtime")
    model = ParallelGPT(cfg, state_dict=init_state_dict(cfg, 0)).cuda()
    ids = torch.randint(0, 512, (2, 1024), device="cuda")
    labels = torch.randint(0, 512, (2, 1024), device="cuda")
    plans = (["ulysses_z+recompute", "metp+recompute"], ["ulysses_z+recompute+offload", "metp+recompute+offload"],
             ["ulysses_z+tiled+offload", "metp+recompute+tiled"])
    results, after_forward, moved = [], [], []
    for plan in plans:
        model.zero_grad()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        _, loss = model(ids, plan, labels, mlp_tile=100)
        torch.cuda.synchronize()
        torch.empty(1, device="cuda")  # the allocator takes back what the side stream has finished with
        after_forward.append(torch.cuda.memory_allocated() - base)
        loss.backward()
        results.append((loss.detach(), [q.grad.clone() for q in model.parameters() if q.grad is not None]))
        moved.append(model.offload_stats)
    for loss, grads in results[1:]:
        assert_close(loss, results[0][0], rtol=1e-5, atol=1e-5)
        for a, b in zip(results[0][1], grads):
            assert_close(b, a, rtol=1e-4, atol=1e-5)
    spec = cfg.with_dtype("fp32")
    # a block plan's recomputed, offloaded layer is checkpointed whole: its input alone, the attention's set
    want = sum(schedule(spec, "attention", StrategyOption.parse(o), 1024, 2, 1).host_bytes for o in plans[1])
    assert sum(moved[1].to_host.values()) == sum(moved[1].to_device.values()) == want > 0
    assert after_forward[0] - after_forward[1] >= want  # the layers' inputs left the device
