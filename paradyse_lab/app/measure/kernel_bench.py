"""Kernel efficiencies for the cost model: GEMMs at the paper models' matmul shapes, attention against length.

Library module of `python -m paradyse_lab.app.measure.gpu_session --out DIR`, which writes what it measures to
DIR/gemm.csv (`GEMM_COLUMNS`) and DIR/attention.csv (`ATTENTION_COLUMNS`). Timing (`measure`): CUDA events around each
call on CUDA, `time.perf_counter` on CPU; warm-up calls first, then the median of the timed repeats.

- GEMMs: for each model, sequence length s (T = s tokens, t = s/p per rank) and the way a strategy shapes
  the rank's matmuls (`LAYOUTS`: megatron_ts runs T tokens through 1/p weight shards, the ZeRO-3 strategies
  t tokens through the gathered weights, METP t tokens through 1/p shards), the four matmuls of a layer
  (qkv [3h, h], proj [h, h], fc1 [f, h], fc2 [h, f], as [out, in]) and their three GEMMs: forward
  Y = X W^T (m = tokens, n = out, k = in), input gradient dX = dY W (m = tokens, n = in, k = out) and
  weight gradient dW = dY^T X (m = out, n = in, k = tokens). FLOPs 2mnk.
- attention: the runtime's kernels (flash-attn when installed, PyTorch's fused flash
  kernel on CUDA, its fused CPU kernel on CPU) at [1, heads/p, s, d] per model, causal and not; FLOPs of
  forward 4 s^2 heads d (halved when causal), backward 2.5x forward (the cost
  model's convention, so that tflops / peak is what `ClusterSpec.attention_eff` means).

efficiency = achieved TFLOP/s over the dense bf16 peak of the device's cluster preset;
empty where the device has no preset (CPU).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

GEMM_COLUMNS = ("model", "matmul", "layout", "op", "tokens", "m", "n", "k", "dtype", "median_s", "repeats",
                "tflops", "peak_tflops", "cluster", "efficiency")
ATTENTION_COLUMNS = ("model", "seq_len", "batch", "heads", "head_dim", "causal", "kernel", "dtype", "fwd_s",
                     "bwd_s", "repeats", "tflops", "peak_tflops", "cluster", "efficiency")
LAYOUTS = ("ts", "zero", "metp")
"""How a strategy shapes a rank's GEMMs (module docstring)."""
GEMM_OPS = ("fwd", "dgrad", "wgrad")
KERNEL_LABELS = {"flash_attn": "flash-attn", "sdpa_flash": "sdpa", "sdpa_cpu": "sdpa-cpu", "math": "math"}
TARGET_SCALE = 1.0
"""Factor on the `target_s` of every `measure` call: 1 in every command (calibrate, gpu_session); a test of what
calibrate writes rather than how precisely it times sets 0, and each point then takes its `min_repeats`."""
REPEATS_CAP: int | None = None
"""Most timed calls of every `measure` call: None (no cap) in every command; the same test sets 1 beside
`TARGET_SCALE` 0, and each point then takes one timed call after its warm-up (the same on every rank)."""


def measure(fn: Callable[[], object], device, warmup: int = 2, max_repeats: int = 10, min_repeats: int = 3,
            target_s: float = 0.2) -> tuple[float, int]:
    """(median seconds, repeats) of `fn`: `warmup` untimed calls, one timed call that sets how many more fit
    in `target_s` (between `min_repeats` and `max_repeats` in all), then those."""
    for _ in range(max(warmup, 0)):
        fn()
    times = [_timed(fn, device)]
    total = max(min_repeats, min(max_repeats, int(target_s * TARGET_SCALE / max(times[0], 1e-9))))
    if REPEATS_CAP is not None:
        total = min(total, REPEATS_CAP)
    while len(times) < total:
        times.append(_timed(fn, device))
    return statistics.median(times), len(times)


def _timed(fn, device) -> float:
    """Seconds of one call (CUDA events on a CUDA device)."""
    if device.type == "cuda":
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize(device)
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def gemm_shapes(specs, seqs, p: int, layouts=LAYOUTS, ops=GEMM_OPS) -> list[dict]:
    """One dict (model, matmul, layout, op, tokens, m, n, k) per distinct (m, n, k, op), in a stable order."""
    out, seen = [], set()
    for spec in specs:
        h, f = spec.hidden, spec.ffn_hidden
        mats = {"qkv": (3 * h, h, "col"), "proj": (h, h, "row"), "fc1": (f, h, "col"), "fc2": (h, f, "row")}
        for s in seqs:
            for layout in layouts:
                tokens = s if layout == "ts" else s // p
                for name, (n_out, n_in, kind) in mats.items():
                    if layout != "zero":  # 1/p shard: column-parallel splits out, row-parallel splits in
                        n_out, n_in = (n_out // p, n_in) if kind == "col" else (n_out, n_in // p)
                    for op in ops:
                        m, n, k = {"fwd": (tokens, n_out, n_in), "dgrad": (tokens, n_in, n_out),
                                   "wgrad": (n_out, n_in, tokens)}[op]
                        if (m, n, k, op) in seen:
                            continue
                        seen.add((m, n, k, op))
                        out.append({"model": spec.name, "matmul": name, "layout": layout, "op": op,
                                    "tokens": tokens, "m": m, "n": n, "k": k})
    return out


def _gemm_fn(op: str, m: int, n: int, k: int, device, dtype):
    """A call running the GEMM with the operand layouts autograd uses for `op`."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    gen = torch.Generator(device=device).manual_seed(0)
    if op == "fwd":  # X [m, k] @ W[n, k]^T
        a, b = (torch.randn(r, k, device=device, dtype=dtype, generator=gen) for r in (m, n))
        return lambda: a @ b.t()
    if op == "dgrad":  # dY [m, k] @ W [k, n]
        a = torch.randn(m, k, device=device, dtype=dtype, generator=gen)
        b = torch.randn(k, n, device=device, dtype=dtype, generator=gen)
        return lambda: a @ b
    a = torch.randn(k, m, device=device, dtype=dtype, generator=gen)  # dY^T: dY [k, m] transposed
    b = torch.randn(k, n, device=device, dtype=dtype, generator=gen)
    return lambda: a.t() @ b  # [m, k] @ [k, n]


def bench_gemms(shapes, device, dtype, peak_flops: float | None, cluster: str, deadline: float,
                quick: bool = False) -> tuple[list[dict], list[dict]]:
    """(rows in GEMM_COLUMNS, skipped shapes) for `shapes` (from `gemm_shapes`) until `deadline`
    (time.perf_counter seconds)."""
    rows, skipped = [], []
    dname = str(dtype).replace("torch.", "")
    rate = 0.0  # FLOP/s of the last GEMM, to predict the next one's time
    opts = {"warmup": 0, "max_repeats": 1, "min_repeats": 1, "target_s": 0.0} if quick else \
        {"warmup": 2, "max_repeats": 10, "min_repeats": 3, "target_s": 0.1}
    for shp in shapes:
        flops = 2.0 * shp["m"] * shp["n"] * shp["k"]
        calls = opts["warmup"] + opts["min_repeats"] + 1
        if time.perf_counter() + (calls * flops / rate if rate else 0.0) > deadline:
            skipped.append(dict(shp, reason="time budget"))
            continue
        fn = _gemm_fn(shp["op"], shp["m"], shp["n"], shp["k"], device, dtype)
        sec, reps = measure(fn, device, **opts)
        del fn
        rate = flops / sec
        tflops = flops / sec / 1e12
        rows.append({**shp, "dtype": dname, "median_s": f"{sec:.6g}", "repeats": reps, "tflops": f"{tflops:.4g}",
                     **_eff(tflops, peak_flops, cluster)})
    return rows, skipped


def _eff(tflops: float, peak_flops: float | None, cluster: str) -> dict:
    if not peak_flops:
        return {"peak_tflops": "", "cluster": cluster, "efficiency": ""}
    return {"peak_tflops": f"{peak_flops / 1e12:.6g}", "cluster": cluster,
            "efficiency": f"{tflops * 1e12 / peak_flops:.4f}"}


def attention_kernels(device) -> list[str]:
    """Kernels to time: the fused ones on CUDA (flash-attn only when installed), PyTorch's fused CPU kernel on
    CPU."""
    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.attention import flash as flash_kernels

    if device.type != "cuda":
        return ["sdpa_cpu"]
    return ["sdpa_flash"] + (["flash_attn"] if flash_kernels._fa is not None else [])


def bench_attention(cases, seqs, device, dtype, peak_flops: float | None, cluster: str, deadline: float,
                    quick: bool = False) -> tuple[list[dict], list[dict]]:
    """(rows in ATTENTION_COLUMNS, skipped) for `cases` [(model, heads, head_dim)] over the ascending lengths
    `seqs`, causal and not, every kernel of `attention_kernels`. A curve stops when its next length (time
    predicted as 4x the last, for a doubling grid) would pass `deadline`, or at an error (out of memory, or
    a kernel that cannot run: recorded with its message in `skipped`; the other kernels' curves still run)."""

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.attention import kernels as attention

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.attention.kernels import is_oom

    rows, skipped = [], []
    dname = str(dtype).replace("torch.", "")
    for model, heads, d in cases:
        for causal in (False, True):
            for kernel in attention_kernels(device):
                fwd, bwd = attention._KERNELS[kernel]
                last = 0.0
                for i, s in enumerate(seqs):
                    growth = (s / seqs[i - 1]) ** 2 if i else 1.0
                    if time.perf_counter() + 4 * last * growth > deadline:
                        skipped += [{"model": model, "seq_len": x, "causal": causal, "kernel": kernel,
                                     "reason": "time budget"} for x in seqs[i:]]
                        break
                    reason = None
                    try:
                        row, last = _attention_point(fwd, bwd, heads, s, d, causal, device, dtype, quick)
                    except Exception as err:  # noqa: BLE001 - this kernel's curve ends; the others still run
                        reason = "out of memory" if is_oom(err) else f"error: {type(err).__name__}: {err}"[:200]
                    if reason is not None:
                        skipped += [{"model": model, "seq_len": x, "causal": causal, "kernel": kernel,
                                     "reason": reason} for x in seqs[i:]]
                        break
                    flops = 3.5 * 4.0 * s * s * heads * d / (2 if causal else 1)
                    tflops = flops / (row["fwd_s"] + row["bwd_s"]) / 1e12
                    rows.append({"model": model, "seq_len": s, "batch": 1, "heads": heads, "head_dim": d,
                                 "causal": str(causal).lower(), "kernel": KERNEL_LABELS[kernel], "dtype": dname,
                                 "fwd_s": f"{row['fwd_s']:.6g}", "bwd_s": f"{row['bwd_s']:.6g}",
                                 "repeats": row["repeats"], "tflops": f"{tflops:.4g}",
                                 **_eff(tflops, peak_flops, cluster)})
    return rows, skipped


def _attention_point(fwd, bwd, heads, s, d, causal, device, dtype, quick):
    """Forward and backward medians of one kernel at [1, heads, s, d]; returns (row, seconds of both)."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    gen = torch.Generator(device=device).manual_seed(0)
    q, k, v, do = (torch.randn(1, heads, s, d, device=device, dtype=dtype, generator=gen) for _ in range(4))
    scale = d ** -0.5
    out, lse = fwd(q, k, v, causal, scale)
    opts = {"warmup": 0, "max_repeats": 1, "min_repeats": 1, "target_s": 0.0} if quick else \
        {"warmup": 1, "max_repeats": 5, "min_repeats": 3, "target_s": 0.1}
    fwd_s, reps = measure(lambda: fwd(q, k, v, causal, scale), device, **opts)
    bwd_s, _ = measure(lambda: bwd(do, q, k, v, out, lse, causal, scale), device, **opts)
    return {"fwd_s": fwd_s, "bwd_s": bwd_s, "repeats": reps}, fwd_s + bwd_s
