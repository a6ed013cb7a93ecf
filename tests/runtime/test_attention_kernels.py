"""The CUDA attention paths of runtime/attention/kernels.py and runtime/attention/flash.py, exercised on CPU with
stand-ins.

Run: `python -m pytest -q tests/runtime/test_attention_kernels.py`.
- flash-attn 2.5, 2.6, 2.7 and 2.8: stubs with each release's `_flash_attn_forward` / `_flash_attn_backward`
  parameters and return values (flash_attn/flash_attn_interface.py of each release; 2.7 and 2.8 define them
  with `torch.library.custom_op`, whose Python signature is `(*args, **kwargs)`), computing with the exact
  math kernel; the runtime's results must equal the math kernel's, and q, k, v, o, dO reach the kernel as
  views of the caller's storage (no layout copy per call).
- an out-of-memory error in a fused kernel is re-raised and does not disable the kernel; `kernels_used`
  names the kernel that actually ran.
"""

from __future__ import annotations

import types
from typing import Optional

import pytest
import torch
from torch.testing import assert_close

from paradyse_lab.runtime.attention import flash as flash_kernels
from paradyse_lab.runtime.attention import kernels as attention
from paradyse_lab.runtime.attention.flash import FA_BACKWARD_ARGS, FA_FORWARD_ARGS, fa_parameter_names
from paradyse_lab.runtime.attention.kernels import _math_backward, _math_forward

B, H, S, D = 2, 3, 8, 4
SCALE = 0.4


def _inputs():
    gen = torch.Generator().manual_seed(0)
    return tuple(torch.randn(B, H, S, D, generator=gen) for _ in range(5))  # q, k, v, do, (spare)


class _Seen:
    """What the stub kernels received (storages of q and dout, the scalar arguments)."""

    def __init__(self):
        self.forward: dict = {}
        self.backward: dict = {}


SEEN = _Seen()


def _stub_fwd(q, k, v, dropout_p, softmax_scale, causal, return_softmax):
    """[b, s, H, d] in -> (out [b, s, H, d] contiguous, lse [b, H, s]), as flash-attn computes them."""
    assert q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1, "flash-attn needs stride(-1) == 1"
    assert dropout_p == 0.0 and return_softmax is False and isinstance(causal, bool)
    SEEN.forward = {"q_ptr": q.untyped_storage().data_ptr(), "scale": softmax_scale, "causal": causal}
    out, lse = _math_forward(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal, softmax_scale)
    return out.transpose(1, 2).contiguous(), lse  # [b,H,s,d] -> [b,s,H,d]


def _stub_bwd(dout, q, k, v, out, lse, dq, dk, dv, dropout_p, softmax_scale, causal):
    """Writes dq, dk, dv [b, s, H, d] in place (every release does)."""
    assert all(x.stride(-1) == 1 for x in (dout, q, k, v, out, dq, dk, dv))
    assert dropout_p == 0.0
    SEEN.backward = {"dout_ptr": dout.untyped_storage().data_ptr(), "scale": softmax_scale, "causal": causal}
    grads = _math_backward(*(x.transpose(1, 2) for x in (dout, q, k, v, out)), lse, causal, softmax_scale)
    for dst, src in zip((dq, dk, dv), grads):
        dst.copy_(src.transpose(1, 2))  # [b,H,s,d] -> [b,s,H,d]
    return torch.zeros(lse.shape, dtype=torch.float32)  # softmax_d


# --- 2.5: window_size tuple, no softcap; forward returns 8 values, backward (dq, dk, dv, softmax_d) --------

def fa25_forward(q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes, return_softmax):
    assert tuple(window_size) == (-1, -1) and alibi_slopes is None
    out, lse = _stub_fwd(q, k, v, dropout_p, softmax_scale, causal, return_softmax)
    return out, q, k, v, out, lse, None, torch.zeros(2, dtype=torch.int64)


def fa25_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p, softmax_scale, causal, window_size,
                  alibi_slopes, deterministic, rng_state=None):
    assert tuple(window_size) == (-1, -1) and alibi_slopes is None and deterministic is False
    d = _stub_bwd(dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p, softmax_scale, causal)
    return dq, dk, dv, d


# --- 2.6: adds softcap after window_size ---------------------------------------------------------------------

def fa26_forward(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, return_softmax):
    assert tuple(window_size) == (-1, -1) and softcap == 0.0 and alibi_slopes is None
    out, lse = _stub_fwd(q, k, v, dropout_p, softmax_scale, causal, return_softmax)
    return out, q, k, v, out, lse, None, torch.zeros(2, dtype=torch.int64)


def fa26_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p, softmax_scale, causal, window_size,
                  softcap, alibi_slopes, deterministic, rng_state=None):
    assert tuple(window_size) == (-1, -1) and softcap == 0.0 and alibi_slopes is None
    d = _stub_bwd(dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p, softmax_scale, causal)
    return dq, dk, dv, d


# --- 2.7 / 2.8: torch.library.custom_op, window_size_left / _right; forward returns 4 values ----------------

def _custom_ops(ns: str):
    @torch.library.custom_op(f"{ns}::_flash_attn_forward", mutates_args=(), device_types="cpu")
    def fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float, softmax_scale: float,
            causal: bool, window_size_left: int, window_size_right: int, softcap: float,
            alibi_slopes: Optional[torch.Tensor], return_softmax: bool  # noqa: UP045 - custom_op schema parser
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        assert (window_size_left, window_size_right, softcap) == (-1, -1, 0.0) and alibi_slopes is None
        out, lse = _stub_fwd(q, k, v, dropout_p, softmax_scale, causal, return_softmax)
        return out, lse, torch.empty(0), torch.zeros(2, dtype=torch.int64)

    @torch.library.custom_op(f"{ns}::_flash_attn_backward", mutates_args=("dq", "dk", "dv"), device_types="cpu")
    def bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
            softmax_lse: torch.Tensor, dq: Optional[torch.Tensor], dk: Optional[torch.Tensor],  # noqa: UP045
            dv: Optional[torch.Tensor], dropout_p: float, softmax_scale: float, causal: bool,  # noqa: UP045
            window_size_left: int, window_size_right: int, softcap: float,
            alibi_slopes: Optional[torch.Tensor], deterministic: bool,  # noqa: UP045
            rng_state: Optional[torch.Tensor] = None) -> torch.Tensor:  # noqa: UP045
        assert (window_size_left, window_size_right, softcap) == (-1, -1, 0.0) and deterministic is False
        return _stub_bwd(dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p, softmax_scale, causal)

    return fwd, bwd


STUBS = {"2.5": (fa25_forward, fa25_backward), "2.6": (fa26_forward, fa26_backward),
         "2.7": _custom_ops("stubfa27"), "2.8": _custom_ops("stubfa28")}


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("version", list(STUBS))
def test_flash_attn_call_conventions(monkeypatch, version, causal):
    fwd, bwd = STUBS[version]
    monkeypatch.setattr(flash_kernels, "_fa", types.SimpleNamespace(_flash_attn_forward=fwd, _flash_attn_backward=bwd))
    q, k, v, do, _ = _inputs()
    out, lse = flash_kernels.fa_forward(q, k, v, causal, SCALE)
    want, want_lse = _math_forward(q, k, v, causal, SCALE)
    assert_close(out, want)
    assert_close(lse, want_lse)
    assert SEEN.forward == {"q_ptr": q.untyped_storage().data_ptr(), "scale": SCALE, "causal": causal}
    grads = flash_kernels.fa_backward(do, q, k, v, out, lse, causal, SCALE)
    for got, ref in zip(grads, _math_backward(do, q, k, v, want, want_lse, causal, SCALE)):
        assert got.shape == (B, H, S, D) and got.is_contiguous()
        assert_close(got, ref)
    assert SEEN.backward == {"dout_ptr": do.untyped_storage().data_ptr(), "scale": SCALE, "causal": causal}


@pytest.mark.parametrize("version", ["2.7", "2.8"])
def test_flash_attn_custom_op_runs_through_the_dispatcher_not_the_fallback(monkeypatch, version):
    """Through `attention_forward` (the path ring attention takes): flash-attn runs, nothing is disabled."""
    fwd, bwd = STUBS[version]
    monkeypatch.setattr(flash_kernels, "_fa", types.SimpleNamespace(_flash_attn_forward=fwd, _flash_attn_backward=bwd))
    monkeypatch.setattr(attention, "backend", lambda q: "flash_attn")
    monkeypatch.setattr(attention, "_BROKEN", set())
    q, k, v, do, _ = _inputs()
    with attention.kernels_used() as ran:
        out, lse = attention.attention_forward(q, k, v, True, SCALE)
        attention.attention_backward(do, q, k, v, out, lse, True, SCALE)
    assert ran == {"flash_attn"} and not attention._BROKEN


def test_parameter_names_fall_back_to_the_release_table():
    opaque = lambda *args, **kwargs: None  # noqa: E731 - neither a signature nor a schema
    assert fa_parameter_names(opaque, FA_FORWARD_ARGS, "2.6.3")[6:8] == ("window_size", "softcap")
    assert fa_parameter_names(opaque, FA_FORWARD_ARGS, "2.8.1")[6] == "window_size_left"
    assert fa_parameter_names(STUBS["2.7"][1], FA_BACKWARD_ARGS) == FA_BACKWARD_ARGS["2.7"]


def test_out_of_memory_is_reraised_without_disabling_the_kernel(monkeypatch):
    calls = {"n": 0}

    def fused_forward(q, k, v, causal, scale):
        calls["n"] += 1
        if calls["n"] == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return _math_forward(q, k, v, causal, scale)

    kernels = dict(attention._KERNELS, sdpa_flash=(fused_forward, _math_backward))
    monkeypatch.setattr(attention, "_KERNELS", kernels)
    monkeypatch.setattr(attention, "backend", lambda q: "sdpa_flash")
    monkeypatch.setattr(attention, "_BROKEN", set())
    q, k, v, _, _ = _inputs()
    with pytest.raises(torch.OutOfMemoryError):
        attention.attention_forward(q, k, v, True, SCALE)
    assert not attention._BROKEN
    with attention.kernels_used() as ran:
        attention.attention_forward(q, k, v, True, SCALE)
    assert ran == {"sdpa_flash"} and calls["n"] == 2


def test_other_errors_fall_back_to_math_with_a_warning_and_say_so(monkeypatch):
    def broken(*args):
        raise RuntimeError("no kernel image is available for execution on the device")

    monkeypatch.setattr(attention, "_KERNELS", dict(attention._KERNELS, sdpa_flash=(broken, broken)))
    monkeypatch.setattr(attention, "backend", lambda q: "sdpa_flash")
    monkeypatch.setattr(attention, "_BROKEN", set())
    q, k, v, _, _ = _inputs()
    with attention.kernels_used() as ran, pytest.warns(RuntimeWarning, match="sdpa_flash"):
        attention.attention_forward(q, k, v, True, SCALE)
    assert ran == {"math"} and attention._BROKEN == {"sdpa_flash"}


def test_a_failing_kernel_loses_only_its_own_attention_curve(monkeypatch):
    """paradyse_lab.app.measure.gpu_session's attention stage: a kernel that raises (an unsupported flash-attn) is
    recorded as skipped with its error, and the other kernels' rows are still written."""
    import time

    from paradyse_lab.app.measure import kernel_bench

    def broken(*args):
        raise TypeError("_flash_attn_forward() missing 3 required positional arguments")

    monkeypatch.setattr(attention, "_KERNELS", dict(attention._KERNELS, flash_attn=(broken, broken)))
    monkeypatch.setattr(kernel_bench, "attention_kernels", lambda device: ["flash_attn", "math"])
    rows, skipped = kernel_bench.bench_attention([("tiny", 2, 8)], [16, 32], torch.device("cpu"), torch.float32,
                                                 None, "", time.perf_counter() + 60, quick=True)
    assert {r["kernel"] for r in rows} == {"math"} and len(rows) == 4  # 2 lengths x causal / not
    assert {s["kernel"] for s in skipped} == {"flash_attn"} and len(skipped) == 4
    assert all(s["reason"].startswith("error: TypeError") for s in skipped)


@pytest.mark.parametrize("version", ["2.5", "2.8"])
def test_flash_attn_gets_grouped_kv_heads_as_they_are(monkeypatch, version):
    """Grouped-query attention (one K/V head for 3 query heads): flash-attn receives K and V with their one
    head (it takes fewer K/V heads natively) and writes dK, dV of one head, equal to the math kernel's."""
    fwd, bwd = STUBS[version]
    monkeypatch.setattr(flash_kernels, "_fa", types.SimpleNamespace(_flash_attn_forward=fwd, _flash_attn_backward=bwd))
    q, k, v, do, _ = _inputs()
    k, v = k[:, :1].contiguous(), v[:, :1].contiguous()
    out, lse = flash_kernels.fa_forward(q, k, v, True, SCALE)
    want, want_lse = _math_forward(q, k.expand(B, H, S, D), v.expand(B, H, S, D), True, SCALE)
    assert_close(out, want)
    grads = flash_kernels.fa_backward(do, q, k, v, out, lse, True, SCALE)
    _, dk_full, dv_full = _math_backward(do, q, k.expand(B, H, S, D), v.expand(B, H, S, D), want, want_lse, True,
                                         SCALE)
    assert grads[1].shape == grads[2].shape == (B, 1, S, D)
    assert_close(grads[1], dk_full.sum(1, keepdim=True))
    assert_close(grads[2], dv_full.sum(1, keepdim=True))
