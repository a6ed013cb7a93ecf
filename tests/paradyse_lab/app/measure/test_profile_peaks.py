"""What a profile row's peak means, and that nothing of an earlier step is alive when it is measured.

Run: `python -m pytest -q tests/paradyse_lab/app/measure/test_profile_peaks.py`. Both profilers
(paradyse_lab/app/measure/profiler.py, the whole model; paradyse_lab/app/measure/stack_profile.py, the layer stack of
`paradyse_lab.app.measure.gpu_session`) hold every model state resident (16 bytes per parameter,
`formulas.model_state_bytes_per_param`, the cost model's count) and record the attention kernel that ran; at the peak
reset no tensor saved for backward by the kept-bytes forward may still be reachable (it would add a copy of every kept
activation to `max_memory_allocated`).
"""

from __future__ import annotations

import gc
import time
import weakref
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from paradyse_lab.app.measure import profiler
from paradyse_lab.app.measure.profile_memory import KeptRecorder
from paradyse_lab.cli.profile_command import parse_options
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.formulas import model_state_bytes_per_param

P = 2


def _opts(**kw):
    base = dict(model="gpt2-tiny", seqs="16", strategies="megatron_cz,metp+recompute", mode="rank-local", p=P,
                rank=0, batch=1, layers=1, warmup=1, repeats=1, device="cpu", dtype="fp32", cluster="", seed=0)
    base.update(kw)
    return parse_options(SimpleNamespace(**base))


@pytest.fixture(scope="module")
def watched_profile():
    """One `profiler.profile` run (two rows), every object its recorder hands autograd watched by a weak reference:
    the rows, and at each peak reset (saved so far, of them still reachable)."""
    saved: list[weakref.ref] = []
    resets: list[tuple[int, int]] = []

    class WatchingRecorder(KeptRecorder):
        def _pack(self, t):
            packed = super()._pack(t)
            saved.append(weakref.ref(packed))
            return packed

    def checking_reset(device):
        gc.collect()
        resets.append((len(saved), sum(ref() is not None for ref in saved)))

    with pytest.MonkeyPatch.context() as mp:  # the names as profiler.py looks them up
        mp.setattr(profiler, "KeptRecorder", WatchingRecorder)
        mp.setattr(profiler, "reset_peak", checking_reset)
        df = profiler.profile(_opts(), progress=False)
    return df, resets


def test_no_saved_tensor_is_reachable_at_the_peak_reset(watched_profile):
    """Every object the recorder hands autograd lives exactly as long as the recorded forward's graph."""
    _, resets = watched_profile
    assert len(resets) == 2  # one per (strategy, length) row
    for saved, alive in resets:
        assert saved and alive == 0, f"{alive} of {saved} saved tensors still reachable at the peak reset"


def test_profile_rows_hold_the_cost_models_model_states_and_name_the_kernel(watched_profile):
    from paradyse_lab.runtime.comm.fake_group import FakeGroup
    from paradyse_lab.runtime.model.parallel_gpt import ParallelGPT

    df, _ = watched_profile
    spec = get_model("gpt2-tiny").with_layers(1)
    local_params = sum(q.numel() for q in ParallelGPT(spec, FakeGroup(P, 0)).parameters())
    states = model_state_bytes_per_param(spec) * local_params  # 16 bytes per parameter (fp32 Adam)
    assert (df["state_bytes"] == states).all()
    assert (df["peak_bytes"] == states + df["kept_bytes"]).all()  # CPU: the lower bound of that peak
    assert set(df["attention_kernel"]) == {"sdpa_cpu"} and set(df["peak_method"]) == {"lower-bound-cpu"}


def test_stack_profile_and_profiler_count_the_same_model_states():
    from paradyse_lab.app.measure.stack_profile import LayerStack, measure_point

    spec = replace(get_model("bert"), layers=1, hidden=64, heads=4, kv_heads=4, ffn_hidden=128, dtype="fp32")
    stack = LayerStack(spec, P, torch.device("cpu"), torch.float32)
    n = sum(q.numel() for q in stack.params)
    pt = measure_point(stack, StrategyOption("megatron_ts"), 32, time.perf_counter() + 30, max_repeats=1)
    assert pt["state_bytes"] == model_state_bytes_per_param(spec) * n
    assert pt["peak_bytes"] == pt["state_bytes"] + pt["kept_bytes"] and pt["attention_kernel"] == "sdpa_cpu"
