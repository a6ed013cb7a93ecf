"""Kernel tables of a GPU nobody measured here, derived from public specifications and the measured H100 tables:
the bundled A100 tables (`a100-80gb-x8`), labelled `source=spec-derived` in every row (not measured).

GEMMs, at the shapes of the measured H100 table (the projections of the bert, llama and gpt layers under each
strategy's weight layout): a kernel's time is taken as a fixed per-call cost plus its work at a shape-dependent
fraction of the GPU's dense peak,

    t_A100 = f + W / (peak_A100 x min(e x r, best_A100)),   e = W / (peak_H100 x (t_H100 - f)),

with W the product's FLOPs, f the H100 table's fastest GEMM (its per-call floor, which does not scale with the
peak) and e the fraction of the H100's peak the rest of its time reached on the shape, assumed to carry over to
the A100 scaled by r, the ratio of the best fraction of peak a BF16 matmul reaches on each GPU (A100 271.2 of
312 TFLOPS = 86.9%, H100 794.5 of 989 = 80.3% [MLE-A]: the A100 is the easier GPU to fill), and never above the
A100's best. Peaks: A100-SXM4 312 TFLOPS dense BF16/FP16 tensor [DS-A] (the authors measured FP16, the same
dense peak as BF16), H100-SXM5 989 [DS-H] (docs/hardware.md sections 1 and 2). Check against A100 measurements:
cuBLASLt reaches 73-82% of the peak on 4k-16k square FP16 products [AZ]; the derived table's largest products
reach 86-87% (gpt, llama) and 73% (bert, whose products are small).

Attention, at the shapes of the measured H100 table: the H100 rows ran PyTorch's flash kernel at about a third
of the H100's peak, which says little of FlashAttention-2 on an A100, so the fraction of peak is instead
FlashAttention-2's own A100-80GB SXM4 forward + backward measurement [FA2] (d = 128, non-causal 151 -> 203
TFLOPS and causal 99 -> 189 from s = 512 to 16k, 16k tokens a batch and 16 heads: work b x heads x s^2 =
262,144 s), log-linear in the call's work between those two points and held beyond them, for the forward and
the backward alike, plus the H100 table's fastest forward and backward call as each direction's per-call
floor. Head dimension 64 (bert) runs at `D64_OVER_D128` of that: the flash-attn package's A100 figure at d = 64,
s = 8192, non-causal (179.5 TFLOPS [AZ]) over the d = 128 curve's at the same length.

What no specification gives (the host's seconds per operation, the runtime's Python per sub-layer, the cost of
a collective call beyond its alpha-beta time) is fitted on the authors' measured A100 step times
(`costmodel ablate` on the paper profile) and kept in dispatch.toml beside the tables, labelled as fitted.
Element-wise work is priced at the A100's datasheet HBM bandwidth (2,039 GB/s [DS-A]), collectives by the
preset's alpha-beta model.

Regenerate: `python -m paradyse_lab.costmodel.replay.spec_tables` (writes paradyse_lab/data/kernels/a100-80gb-x8's
gemm.csv and attention.csv; a test checks the bundled files are what it writes).
"""

from __future__ import annotations

import csv
import io
import math
import sys
from pathlib import Path

from paradyse_lab.cluster.presets import A100_ATTN, A100_ATTN_CAUSAL, HOPPER_GEMM_SCALE, PRESETS
from paradyse_lab.costmodel.replay.ops import Op
from paradyse_lab.costmodel.replay.tables import BUNDLED, SPEC_DERIVED

FROM_DEVICE = "h100-80gb-x8"
TO_DEVICE = "a100-80gb-x8"
FA2_TOKENS, FA2_HEADS = 16384, 16
"""FlashAttention-2's benchmark [FA2]: 16k tokens a batch (batch = 16k / s), hidden 2048 = 16 heads of 128."""
A100_BEST_GEMM = 271.2 / 312
"""The best BF16 matmul measured on an A100, as a fraction of its peak [MLE-A]."""
D64_AT_8K_TFLOPS = 179.5
"""flash-attn on an A100 at d = 64, s = 8192, non-causal [AZ]."""

GEMM_COLUMNS = ("model", "matmul", "layout", "op", "tokens", "m", "n", "k", "dtype", "median_s", "tflops",
                "peak_tflops", "cluster", "efficiency", "source")
ATTENTION_COLUMNS = ("model", "seq_len", "batch", "heads", "head_dim", "causal", "kernel", "dtype", "fwd_s",
                     "bwd_s", "tflops", "peak_tflops", "cluster", "efficiency", "source")


def fa2_efficiency(work: float, causal: bool, head_dim: int = 128) -> float:
    """FlashAttention-2's fraction of the A100's peak at `work` = b x heads x s^2 (module docstring)."""
    curve = A100_ATTN_CAUSAL if causal else A100_ATTN
    (s0, e0), (s1, e1) = curve
    x0, x1 = (math.log(FA2_TOKENS * FA2_HEADS * s) for s in (s0, s1))
    x = min(max(math.log(max(work, 1.0)), x0), x1)
    e = math.exp(math.log(e0) + (math.log(e1) - math.log(e0)) * (x - x0) / (x1 - x0))
    return e * D64_OVER_D128 if head_dim <= 64 else e


def _d64_over_d128() -> float:
    """[AZ]'s d = 64 figure over the d = 128 curve's at s = 8192, non-causal."""
    return D64_AT_8K_TFLOPS / (fa2_efficiency(FA2_TOKENS * FA2_HEADS * 8192, False) * 312)


D64_OVER_D128 = _d64_over_d128()
"""Head dimension 64's attention efficiency over 128's on the A100 (module docstring)."""


def _read(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def derive_gemm(rows: list[dict], from_peak: float, to_peak: float, to_name: str, scale: float = 1.0,
                best: float = 1.0) -> list[dict]:
    """The rows of a measured GEMM table at another GPU's peak, each shape's fraction of peak times `scale`, at
    most `best` (module docstring)."""
    floor = min(float(r["median_s"]) for r in rows)
    out = []
    for r in rows:
        op = Op("gemm", "mm", r["dtype"], m=int(r["m"]), n=int(r["n"]), k=int(r["k"]), batch=int(r.get("batch") or 1))
        rest = float(r["median_s"]) - floor
        t = floor + (op.flops / (to_peak * min(op.flops / (from_peak * rest) * scale, best)) if rest > 0 else 0.0)
        out.append({**{c: r[c] for c in GEMM_COLUMNS[:9]}, "median_s": f"{t:.6g}",
                    "tflops": f"{op.flops / t / 1e12:.4g}", "peak_tflops": f"{to_peak / 1e12:g}", "cluster": to_name,
                    "efficiency": f"{op.flops / t / to_peak:.4f}", "source": SPEC_DERIVED})
    return out


def derive_attention(rows: list[dict], to_peak: float, to_name: str) -> list[dict]:
    """The shapes of a measured attention table priced at FlashAttention-2's A100 efficiency (module docstring)."""
    floors = {col: min(float(r[col]) for r in rows) for col in ("fwd_s", "bwd_s")}
    out = []
    for r in rows:
        s, b, h, d = int(r["seq_len"]), int(r["batch"]), int(r["heads"]), int(r["head_dim"])
        causal = r["causal"].strip().lower() == "true"
        eff = fa2_efficiency(b * h * s * s, causal, d)
        times, flops = {}, 0.0
        for which, col in (("forward", "fwd_s"), ("backward", "bwd_s")):
            op = Op("attention", "a", batch=b, sq=s, sk=s, heads=h, kv_heads=h, head_dim=d, causal=causal,
                    which=which)
            times[col] = floors[col] + op.flops / (eff * to_peak)
            flops += op.flops
        total = times["fwd_s"] + times["bwd_s"]
        out.append({**{c: r[c] for c in ATTENTION_COLUMNS[:8]}, "kernel": "flash-attention-2",
                    "fwd_s": f"{times['fwd_s']:.6g}", "bwd_s": f"{times['bwd_s']:.6g}",
                    "tflops": f"{flops / total / 1e12:.4g}", "peak_tflops": f"{to_peak / 1e12:g}",
                    "cluster": to_name, "efficiency": f"{flops / total / to_peak:.4f}", "source": SPEC_DERIVED})
    return out


def _csv(rows: list[dict], columns: tuple[str, ...]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, columns, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def a100_tables(kernels: Path) -> dict[str, str]:
    """{file name: CSV text} of the A100 tables, derived from the bundled H100 tables under `kernels`."""
    src = kernels / FROM_DEVICE
    from_peak, to_peak = PRESETS[FROM_DEVICE].peak_flops, PRESETS[TO_DEVICE].peak_flops
    gemm = derive_gemm(_read(src / "gemm.csv"), from_peak, to_peak, TO_DEVICE, 1 / HOPPER_GEMM_SCALE, A100_BEST_GEMM)
    return {"gemm.csv": _csv(gemm, GEMM_COLUMNS),
            "attention.csv": _csv(derive_attention(_read(src / "attention.csv"), to_peak, TO_DEVICE),
                                  ATTENTION_COLUMNS)}


def main() -> int:
    out = BUNDLED / TO_DEVICE
    out.mkdir(exist_ok=True)
    for name, text in a100_tables(BUNDLED).items():
        (out / name).write_text(text)
        print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
