"""Rank-local profiles of a model's layer stack at p ranks, up to the memory limit, under a time budget.

Library module of `python -m paradyse_lab.app.measure.gpu_session --out DIR`, which writes DIR/<device-kind>_<model>.csv
in the cost model's profile schema (source=measured-rank-local) plus `EXTRA_COLUMNS`. The paper's
`bert`, `llama` and `gpt` presets are layer stacks (no embedding, head or loss: the paper times the layers
only), which `paradyse-lab costmodel profile` (a whole `ParallelGPT`)
cannot run; this module runs exactly the stack: L layers of the runtime's attention and MLP sub-layers (`run_sublayer`,
the same autograd nodes `ParallelGPT` uses) on rank 0 of a p-rank world emulated by a `FakeGroup`.

One row, one (strategy option, s): a training step of the stack, x [b, s/p, h] -> y, then y.backward(dy).
- compute_s: the median of the timed steps (CUDA events on CUDA, perf_counter on CPU) after one untimed
  step (which also records kept_bytes); repeats as many as fit the curve's time share, at most 3. It holds
  the rank's kernels and the local copies the fake group makes in place of collectives (the output buffers
  a real collective would also write), no communication.
- time_s = compute_s + comm_s, comm_s the communication the analytic model leaves exposed on `cluster`
  (alpha-beta, ring overlap; comm_modelled=true), as `paradyse-lab costmodel profile --mode rank-local` does.
- peak_bytes: `torch.cuda.max_memory_allocated` over the steps (reset before them). Model states are all
  resident, as in training: weights and gradients (allocated up front, accumulated into), and the
  mixed-precision Adam states that `formulas.model_state_bytes_per_param` charges (12 bytes per parameter
  in bf16: fp32 master, m, v) as one untouched allocation (`adam_state_bytes`; no optimizer step is run
  or timed): the cost model's peak. On CPU there is no allocator counter:
  peak_bytes = state_bytes + kept_bytes, a lower bound
  (peak_method says which).
- kept_bytes: the storages saved for backward (paradyse_lab.app.measure.profile_memory.KeptRecorder), parameters
  excluded.
- attention_kernel: the attention kernels that actually ran (`kernels_used`).
A curve walks its lengths upward and stops at the first out-of-memory error (recorded as oom_len, nothing
measured past it) or when the next length's predicted time no longer fits its deadline (recorded as
skipped, never extrapolated).
"""

from __future__ import annotations

import datetime as _dt
import gc
import math
import statistics
import time
from dataclasses import replace

import torch

from paradyse_lab.app.measure.kernel_bench import _timed
from paradyse_lab.app.measure.profile_memory import KeptRecorder, reset_peak, resident_model_states
from paradyse_lab.core.strategies import get_strategy
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime.attention.kernels import is_oom, kernels_used
from paradyse_lab.runtime.comm.fake_group import FakeGroup
from paradyse_lab.runtime.model.layout import check_length
from paradyse_lab.runtime.model.sublayer import Ctx, run_sublayer

EXTRA_COLUMNS = ("compute_s", "comm_s", "comm_modelled", "repeats", "dtype", "state_bytes", "adam_state_bytes",
                 "peak_reserved_bytes", "peak_method", "cluster", "attention_kernel")
"""Columns after profiles.COLUMNS (ignored by paradyse_lab.costmodel.profiles.read_profiles)."""
MAX_REPEATS = 3


class LayerStack:
    """Rank `rank`'s 1/p weight shards of every layer of `spec` on `device`, with resident model states."""

    def __init__(self, spec, p: int, device, dtype, rank: int = 0, seed: int = 0):
        if spec.ffn_kind != "gelu" or spec.norm != "layernorm" or not spec.bias or spec.kv_heads != spec.heads:
            raise UserInputError(f"model {spec.name!r}: the runtime runs GPT-2-shaped layers only")
        if spec.embedding_and_head:  # its rows would be priced with an embedding and head they did not run
            raise UserInputError(f"model {spec.name!r} has an embedding and head: use `paradyse-lab costmodel profile`")
        for name, value in (("hidden", spec.hidden), ("ffn_hidden", spec.ffn_hidden), ("heads", spec.heads)):
            if value % p:
                raise UserInputError(f"model {spec.name!r}: {name} ({value}) must be divisible by p ({p})")
        self.spec, self.p, self.rank, self.device, self.dtype = spec, p, rank, device, dtype
        self.group = FakeGroup(p, rank)
        torch.manual_seed(seed)
        h, f = spec.hidden, spec.ffn_hidden

        def sub(n1: int, n2: int) -> list:  # PARAM_NAMES order: ln_w, ln_b, w1 [n1/p, h], b1, w2 [n2/p, h], b2
            shapes = ((h,), (h,), (n1 // p, h), (n1 // p,), (n2 // p, h), (h,))
            out = []
            for i, shape in enumerate(shapes):  # made on the device: gpt's 1.8e9 parameters would take long on CPU
                kw = {"device": device, "dtype": dtype}
                t = torch.ones(shape, **kw) if i == 0 else \
                    (torch.randn(shape, **kw).mul_(0.02) if i in (2, 4) else torch.zeros(shape, **kw))
                t.requires_grad_()
                t.grad = torch.zeros_like(t)  # resident gradient, accumulated into
                out.append(t)
            return out

        self.layers = [(sub(3 * h, h), sub(f, f)) for _ in range(spec.layers)]
        self.params = [q for layer in self.layers for part in layer for q in part]
        spec_dtype = "fp32" if dtype == torch.float32 else "bf16"
        self._adam, _ = resident_model_states(self.params, replace(spec, dtype=spec_dtype), device)  # untouched
        self.adam_state_bytes = self._adam.numel()

    def violation(self, option, seq_len: int) -> str | None:
        """Why `option` cannot run `seq_len` on this stack, or None."""
        try:
            check_length(seq_len, self.p)
        except UserInputError as err:
            return str(err)
        return get_strategy(option.strategy).violation(self.spec, self.p, seq_len)

    def forward(self, option, x, seq_len: int):
        """x [b, s/p, h] -> y [b, s/p, h] through every layer under `option`."""
        # lazy: safetensors: only checkpoint paths need it
        from paradyse_lab.runtime.model.parallel_gpt import STRATEGY_MODULES

        module = STRATEGY_MODULES[option.strategy]
        for index, (att, mlp) in enumerate(self.layers):
            for kind, params, impl in (("attention", att, module.ATTENTION), ("mlp", mlp, module.MLP)):
                ctx = Ctx(group=self.group, p=self.p, rank=self.rank, kind=kind, heads=self.spec.heads,
                          causal=self.spec.causal, seq_len=seq_len, eps=1e-5, tag=f"layers.{index}.{kind}")
                x = run_sublayer(impl, ctx, option.recompute, x, params)
        return x


def measure_point(stack: LayerStack, option, seq_len: int, deadline: float, batch: int = 1,
                  max_repeats: int = MAX_REPEATS) -> dict:
    """compute_s, repeats, peak, kept and state bytes of one step of `option` at `seq_len` (module docstring)."""
    dev, cuda = stack.device, stack.device.type == "cuda"
    x = torch.randn(batch, seq_len // stack.p, stack.spec.hidden, device=dev, dtype=stack.dtype)  # [b, s/p, h]
    x.requires_grad_()
    x.grad = torch.zeros_like(x)
    dy = torch.randn_like(x)  # the gradient arriving from the layers above

    def step():
        stack.forward(option, x, seq_len).backward(dy)

    reset_peak(dev)
    if cuda:
        state = torch.cuda.memory_allocated(dev)
    else:
        state = sum(q.numel() * q.element_size() * 2 for q in stack.params) + stack.adam_state_bytes
    t0 = time.perf_counter()
    with kernels_used() as ran:
        with KeptRecorder(exclude=stack.params) as rec:  # the untimed step: warm-up and kept bytes
            y = stack.forward(option, x, seq_len)
        kept = rec.nbytes
        y.backward(dy)
        del y, rec
        if cuda:
            torch.cuda.synchronize(dev)
        first = time.perf_counter() - t0
        fit = int(0.5 * (deadline - time.perf_counter()) / max(first, 1e-9))
        times = [_timed(step, dev) for _ in range(max(1, min(max_repeats, fit)))]
    out = {"compute_s": statistics.median(times), "repeats": len(times), "kept_bytes": kept, "state_bytes": state,
           "attention_kernel": "+".join(sorted(ran))}
    if cuda:
        out.update(peak_bytes=int(torch.cuda.max_memory_allocated(dev)), peak_method="max_memory_allocated",
                   peak_reserved_bytes=int(torch.cuda.max_memory_reserved(dev)))
    else:
        out.update(peak_bytes=state + kept, peak_method="lower-bound-cpu", peak_reserved_bytes=0)
    return out


def predict_step_s(known: dict, seq_len: int) -> float:
    """Predicted step seconds at `seq_len` from measured {length: seconds}: from the longest shorter length,
    growing as s^alpha (alpha from its two longest shorter lengths, clamped to [1, 2], else 2), +20%; the next
    longer length's time when none is shorter; 0 when nothing is known."""
    below = sorted(s for s in known if s <= seq_len)
    if not below:
        above = sorted(s for s in known if s > seq_len)
        return known[above[0]] if above else 0.0
    s1 = below[-1]
    alpha = 2.0
    if len(below) >= 2:
        s0 = below[-2]
        alpha = min(2.0, max(1.0, math.log(known[s1] / known[s0]) / math.log(s1 / s0)))
    return 1.2 * known[s1] * (seq_len / s1) ** alpha


def profile_curve(stack: LayerStack, option, lengths, deadline: float, known: dict | None = None,
                  max_repeats: int = MAX_REPEATS) -> dict:
    """Measure `option` at the ascending `lengths` until OOM or `deadline` (time.perf_counter seconds).

    Returns {"points": {s: measure_point dict}, "oom_len": int | None, "skipped": [[s, reason]]}.
    `known` {s: step seconds} from earlier passes seeds the time predictions."""
    known = dict(known or {})
    points, skipped, oom_len = {}, [], None
    for i, s in enumerate(lengths):
        why = stack.violation(option, s)
        if why:
            skipped.append([s, f"shape: {why}"])
            continue
        if time.perf_counter() + 2 * predict_step_s(known, s) > deadline:  # the untimed step + one timed
            skipped += [[x, "time budget"] for x in lengths[i:]]
            break
        failed = False
        try:
            points[s] = measure_point(stack, option, s, deadline, max_repeats=max_repeats)
        except Exception as err:  # noqa: BLE001 - out-of-memory errors only; the rest is re-raised
            if not is_oom(err):  # paradyse_lab.runtime.attention.kernels.is_oom
                raise
            failed = True
        if failed:  # outside the handler, so the failed step's tensors are already released
            oom_len = s
            free_memory(stack.device)
            skipped += [[x, f"after out of memory at {s}"] for x in lengths[i + 1:]]
            break
        known[s] = points[s]["compute_s"]
    return {"points": points, "oom_len": oom_len, "skipped": skipped}


def free_memory(device) -> None:
    """Collect garbage and hand cached blocks back, on CUDA only: the next stack and length need the memory
    there; a CPU run's lengths are not limited by it, and a collection of a large process (a test run's) takes
    a few tenths of a second each time."""
    if device.type == "cuda":
        import torch

        gc.collect()
        torch.cuda.empty_cache()


def rows_of_curve(stack: LayerStack, option, points: dict, analytic, device_name: str, software: str,
                  cluster: str, batch: int = 1) -> list[dict]:
    """Profile rows (profiles.COLUMNS + EXTRA_COLUMNS) of the measured points; comm_s priced by `analytic`
    (an AnalyticCostModel of the stack on `cluster` at p)."""
    spec = stack.spec
    stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    dname = str(stack.dtype).replace("torch.", "")
    rows = []
    for s, pt in sorted(points.items()):
        comm = 0.0
        if stack.p > 1:
            parts = (analytic.sublayer(k, option, s, batch) for k in ("attention", "mlp"))
            comm = spec.layers * sum(c.exposed_comm_s for c in parts)
        rows.append({
            "model": spec.name, "h": spec.hidden, "heads": spec.heads, "kv_heads": spec.kv_heads,
            "layers": spec.layers, "p": stack.p, "strategy": option.strategy,
            "recompute": "true" if option.recompute else "false", "seq_len": s, "batch": batch,
            "time_s": f"{pt['compute_s'] + comm:.6g}", "peak_bytes": max(pt["peak_bytes"], pt["kept_bytes"]),
            "kept_bytes": pt["kept_bytes"], "device": device_name, "source": "measured-rank-local",
            "software": software, "timestamp": stamp, "compute_s": f"{pt['compute_s']:.6g}", "comm_s": f"{comm:.6g}",
            "comm_modelled": "true", "repeats": pt["repeats"], "dtype": dname, "state_bytes": pt["state_bytes"],
            "adam_state_bytes": stack.adam_state_bytes, "peak_reserved_bytes": pt["peak_reserved_bytes"],
            "peak_method": pt["peak_method"], "cluster": cluster, "attention_kernel": pt["attention_kernel"],
        })
    return rows
