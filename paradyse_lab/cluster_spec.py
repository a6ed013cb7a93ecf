"""GPU node descriptions (`ClusterSpec`) for the analytic cost model, their presets and TOML loading.

Every number carries its source key from docs/hardware.md (kind: P vendor peak, M measured, Mdl NCCL
model constant, E derived by us):

- peak dense bf16 FLOP/s, HBM bandwidth: datasheets [DS-A] [DS-H] (P).
- memory seen by CUDA: A100 81,251 / 40,441 MiB [DQ] (M); H100 81,559 MiB and H200 143,771 MiB as
  reported by nvidia-smi on an H100 80GB HBM3 and an H200 machine in 2026-11 (M).
- collective bus bandwidths (nccl-tests busbw convention [PERF]): A100 all_gather / reduce_scatter /
  all_reduce ~230 GB/s (tests#149, [AZ]); p2p 195 GB/s @1 GB [LP]; H100 ~370 (tests#212), alltoall 336
  (nccl#2169, 4 GPUs), p2p 371 (nccl#1264); H200 365 ring, p2p 396 [MLE-N] (M). A100 and H200 alltoall
  have no published 8-GPU number: E = their all_gather busbw x (336/370), H100's alltoall/all_gather ratio.
  Broadcast: E = the all_gather busbw (a pipelined ring broadcast runs at the effective link rate).
- bandwidth against message size: the fraction of the large-message busbw reached at 1 MB, 16 MB,
  256 MB and 2 GB, from Azure's all_reduce sweeps [AZ] (A100 36/109/214/230 GB/s; H100 44/234/423/472);
  applied to every collective (E); H200 uses H100's curve (E).
- latency alpha: NCCL's tuning model [TUNE], Ring LL base 6.6 us + 0.6 us per NVLink step (Mdl).
- GEMM efficiency against the smallest matrix dimension: A100 cuBLASLt FP16 cubes 1k..16k =
  119.4/221.8/228.0/253.7/256.5 TFLOPS of 312 [AZ] (M). Hopper: E = the A100 curve scaled to H100's
  best-matmul fraction (794.5/989 = 80.3% [MLE-A]) over A100's (271.2/312 = 86.9%).
- attention (FlashAttention-2 fwd+bwd, d = 128) efficiency against sequence length: A100 non-causal
  151 -> 203 TFLOPS and causal 99 -> 189 TFLOPS from s = 512 to 16k [FA2] (M, as read in a review);
  H100: FA2 fwd+bwd reaches 335 TFLOPS at long s [FA2] (M), the short-s end scaled by A100's ratio (E).
- memory reserve (docs/hardware.md section 5): what a training process holds before the model, kept out of
  every plan's budget: CUDA context ~300 MB (pytorch#107667), cuBLAS workspace ~8.1 MiB [PT], NCCL buffers
  688 MB per communicator on A100 (nccl#964) and 4.34 GB for an 8x H100 all-to-all plus 288 MiB of NVLS
  buffers (nccl#1685, vllm#9699) on Hopper (M); the sum rounded up to a whole GiB, the rounding being the
  allowance for the allocator's slack (E): A100 1 GiB, H100 / H200 5 GiB. `reserve_fraction` (default 0)
  keeps a share of the memory back as well (Galvatron plans with 20% [GAL]).
- host link and host memory (docs/hardware.md section 7), what activation offload uses: PCIe Gen4 x16 on A100
  SXM, 64 GB/s both ways [DS-A], Gen5 x16 on H100 / H200 SXM, 128 GB/s both ways [DS-H]: 32 and 64 GB/s per
  direction (P); system memory DGX A100 1 TB (320 GB model) or 2 TB (640 GB model) [DGX-A], DGX H100 / H200
  2 TB [DGX-H] (P).
"""

from __future__ import annotations

import math

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from paradyse_lab.errors import UserInputError, require_positive_int, unknown_name
from paradyse_lab.typed_json import WrittenNumber

COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "p2p", "broadcast")
"""Collective kinds the cost model charges (p2p = one point-to-point send of a ring step)."""

MIB = 2**20
GIB = 2**30
GB = 1e9

CUDA_CONTEXT_BYTES = 300_000_000
"""CUDA context per process with lazy module loading (pytorch/pytorch#107667; docs/hardware.md section 5)."""
CUBLAS_WORKSPACE_BYTES = int(8.1 * MIB)
"""cuBLAS workspace per handle and stream with the default config [PT]."""
NCCL_A100_BYTES = 688_000_000
"""NCCL buffers of one communicator over more than 2 GPUs, measured on 4x A100 (nccl#964)."""
NCCL_HOPPER_BYTES = 4_340_000_000 + 288 * MIB
"""An 8x H100 all-to-all's NCCL memory after its first call (nccl#1685) plus NVLS buffers (vllm#9699)."""


def sourced_reserve_bytes(nccl_bytes: int) -> int:
    """CUDA context + cuBLAS workspace + NCCL buffers, rounded up to a whole GiB (the rounding: the allocator's
    slack, module docstring)."""
    return -(-(CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES + nccl_bytes) // GIB) * GIB


def interpolate_loglinear(points: tuple[tuple[float, float], ...], x: float) -> float:
    """Piecewise-linear interpolation in log(x) through sorted (x, y) points, clamped at both ends."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            w = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return y0 + w * (y1 - y0)
    return points[-1][1]


CALIBRATION_PARAMETERS = ("compute_scale", "comm_scale", "layer_overhead_s", "width_overhead_s")
"""The physical parameters of a strategy's calibration (`StrategyCalibration`), in TOML key order."""


MAX_GPUS = 2**20
"""Most GPUs a cluster may have (a bound checked before any arithmetic on the count)."""


@dataclass(frozen=True)
class StrategyCalibration:
    """What the analytic model misses for one strategy, fitted to measured times (costmodel/calibration.py).

    A sub-layer's calibrated time = compute_scale x its analytic compute time + comm_scale x its analytic
    exposed communication time + (layer_overhead_s + width_overhead_s x h) / 2, h the hidden size (a layer
    is two sub-layers). The identity (1, 1, 0, 0) is the analytic model.
    """

    compute_scale: float = 1.0
    """Measured over modelled compute time: 1 / (the fraction of the modelled GEMM and attention efficiency
    the implementation reaches)."""
    comm_scale: float = 1.0
    """Measured over modelled exposed communication: 1 / (the fraction of the modelled bus bandwidth reached,
    overlap included)."""
    layer_overhead_s: float = 0.0
    """Fixed seconds per layer and step that do not grow with the length: kernel launches, collective call
    set-up, host synchronisation (the alpha of alpha-beta covers microseconds of it, not this)."""
    width_overhead_s: float = 0.0
    """Fixed seconds per layer and step per unit of hidden size: the part of the length-independent cost
    that grows with the layer's width. Empirical: on the authors' measurements the ZeRO-3 strategies' fixed
    cost per layer grows as h (as the square root of the weight bytes), faster than latency and slower than
    the bandwidth term of gathering the weights, i.e. collectives in the regime where the bandwidth reached
    still grows with the message size."""

    def __post_init__(self):
        for name in CALIBRATION_PARAMETERS:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise UserInputError(f"calibration.{name} must be a finite number >= 0, got {v!r}")

    def time_s(self, compute_s: float, exposed_comm_s: float, hidden: int) -> float:
        """Calibrated seconds of one sub-layer (half a layer) from its analytic parts."""
        return (self.compute_scale * compute_s + self.comm_scale * exposed_comm_s
                + (self.layer_overhead_s + self.width_overhead_s * hidden) / 2)


_STEP_TERM_KEYS = (("launch_s", "launch_us"), ("epilogue_s", "epilogue_ms"),
                   ("collective_sync_s", "collective_sync_us"), ("runtime_launch_s", "runtime_launch_us"),
                   ("state_bytes_per_s", "state_gbps"))
"""The measured step terms `ClusterSpec` checks to be finite and >= 0: (field, the TOML key its message names)."""


@dataclass(frozen=True)
class ClusterSpec:
    """One node of identical GPUs joined by a switched interconnect (the paper's 1-D device grid)."""

    name: str
    """Preset or file name."""
    gpus: int
    """Number of GPUs p sharing the sequence."""
    gpu_name: str
    """Marketing name of the GPU."""
    memory_bytes: int
    """Device memory CUDA can allocate from, per GPU."""
    peak_flops: float
    """Dense bf16 tensor-core peak, FLOP/s per GPU."""
    hbm_bytes_per_s: float
    """HBM bandwidth per GPU, B/s."""
    busbw_bytes_per_s: dict = field(default_factory=dict)
    """Large-message bus bandwidth per collective kind (nccl-tests convention), B/s."""
    busbw_size_curve: tuple = ()
    """(message bytes, fraction of the large-message busbw) points, ascending."""
    alpha_base_s: float = 6.6e-6
    """Per-call latency of a collective, s."""
    alpha_step_s: float = 0.6e-6
    """Extra latency per ring step, s."""
    alpha_by_op_s: dict = field(default_factory=dict)
    """Measured per-call latency of a collective kind, s (`paradyse-lab calibrate`); replaces
    alpha_base_s + alpha_step_s x steps for the kinds it names."""
    gemm_efficiency: tuple = ()
    """(smallest GEMM dimension, fraction of peak) points, ascending."""
    attention_efficiency: tuple = ()
    """(sequence length, fraction of peak) for non-causal FlashAttention fwd+bwd, ascending."""
    attention_efficiency_causal: tuple = ()
    """(sequence length, fraction of peak) for causal FlashAttention fwd+bwd, ascending."""
    source: str = field(default="", compare=False)
    """Where the numbers come from."""
    calibration: dict = field(default_factory=dict)
    """Strategy name -> `StrategyCalibration` the analytic model applies (empty: uncalibrated)."""
    reserve_bytes: int = 0
    """Device memory a training process holds before the model (CUDA context, NCCL buffers, allocator slack),
    kept out of every plan's budget (`plan_budget_bytes`; TOML `reserve_gib`)."""
    reserve_fraction: float = 0.0
    """Share of `memory_bytes` kept back on top of `reserve_bytes` (TOML `reserve_fraction`)."""
    host_link_bytes_per_s: float = 0.0
    """Host link of one GPU (PCIe), B/s per direction that a pinned-memory copy reaches over it: what activation
    offload's copies move at (TOML `host_link_gbps`; 0: unknown, no offload is planned)."""
    host_memory_bytes: int = 0
    """Host (CPU) memory of the node, shared by its GPUs: what offloaded activations may fill (TOML
    `host_memory_gib`; 0: unknown, no offload is planned)."""
    base: str = field(default="", compare=False)
    """The preset a cluster file starts from (`base = NAME`), '' for a preset or a file without one."""
    launch_s: float = 0.0
    """Seconds per operator dispatch outside the attention kernels and collectives (TOML `launch_us`; measured
    clusters: `paradyse-lab calibrate` times a forward + backward chain of tiny operators that require grad over
    the dispatches counted in it; 0 for the GPU presets, whose kernels are fused)."""
    runtime_launch_s: float = 0.0
    """Seconds per operator dispatch inside the runtime's sub-layers, embedding, head and loss (TOML
    `runtime_launch_us`): `launch_s` plus the runtime's own Python between its operators (measured clusters:
    `calibrate` times the model's forward + backward at the shortest length that splits, over the dispatches
    counted in it, less what it moves; 0: `launch_s`). The optimizer step's dispatches cost `launch_s`."""
    epilogue_s: float = 0.0
    """Seconds of what a training step runs after its backward on one rank (gradient norm, AdamW, finite check;
    TOML `epilogue_ms`; measured clusters: `calibrate` times it for `counted_model` at `gpus` ranks, every rank at
    once; 0: priced from the counted `optimizer` launches and bytes)."""
    collective_sync_s: float = 0.0
    """Seconds each collective call costs beyond its alpha-beta time when the ranks reach it from compute, as in
    a training step (TOML `collective_sync_us`; measured clusters: `calibrate` times GEMM-then-all-gather pairs
    against the GEMMs and the all-gathers alone; 0 for the presets, whose alpha-beta values are of steps)."""
    comm_overlap: float = 1.0
    """Fraction of a ring's point-to-point time that can hide behind compute (1: all of it, the GPU presets;
    measured clusters: `calibrate` times a GEMM and a ring exchange apart and together)."""
    state_bytes_per_s: float = 0.0
    """Memory bandwidth over buffers the size of the model states, B/s, for the optimizer step (measured
    clusters: an add over a buffer larger than the caches; 0: `hbm_bytes_per_s`)."""
    counted_model: str = ""
    """The model (preset name) `step_counts` were counted for; they apply to it at p = gpus only."""
    gpus_per_node: int = 0
    """GPUs of one node, joined by the `busbw_bytes_per_s` links (NVLink); 0: all `gpus` are one node. A cluster
    of several nodes has `gpus` = nodes x gpus_per_node, a power of two per node (groups are aligned
    power-of-two blocks of ranks, paradyse_lab/step_groups.py), and an inter-node link (TOML `nodes`,
    `gpus_per_node`)."""
    inter_node_bytes_per_s: float = 0.0
    """Bandwidth each GPU reaches to the other nodes through its own NIC (rail-aligned: one NIC per GPU), B/s
    (TOML `inter_node_bandwidth_gbps`, GB/s); 0: no inter-node link known."""
    inter_node_alpha_s: float = 2.7e-6
    """Latency of one ring step over the network, s (TOML `inter_node_latency_us`): NCCL's tuning model
    charges 2.7 us per network step of a Ring LL collective [TUNE] (Mdl)."""
    step_counts: dict = field(default_factory=dict)
    """What the runtime launches and moves besides GEMMs, attention and collectives, counted by `calibrate`
    at this cluster's world size (paradyse_lab/app/measure/step_counts.py): key "OPTION.attention" / "OPTION.mlp"
    per strategy option, "fixed" (embedding, head, loss) and "optimizer" -> (launches, bytes_fixed,
    bytes_per_token); the analytic model prices them with `launch_s` and `hbm_bytes_per_s`. Empty for the
    presets."""

    @property
    def plan_budget_bytes(self) -> int:
        """What a plan may use per GPU: the memory less the reserve (the budget of `plan`, `simulate` and
        `train` unless a budget is given)."""
        return self.memory_bytes - self.reserve_bytes - int(self.reserve_fraction * self.memory_bytes)

    @property
    def node_gpus(self) -> int:
        """GPUs per node (all of them when the cluster is one node)."""
        return min(self.gpus_per_node, self.gpus) if self.gpus_per_node else self.gpus

    @property
    def nodes(self) -> int:
        """Number of nodes."""
        return self.gpus // self.node_gpus

    @property
    def host_budget_bytes(self) -> int:
        """Host memory one GPU's offloaded activations may fill: the node's host memory shared evenly by its GPUs."""
        return self.host_memory_bytes // self.node_gpus

    @property
    def device(self) -> str:
        """The hardware's name: the base preset of a cluster file (its bundled profiles are this one's)."""
        return self.base or self.name

    def __post_init__(self):
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or not 0 < self.gpus <= MAX_GPUS:
            raise UserInputError(f"cluster.gpus must be an integer from 1 to {MAX_GPUS:,}, got {self.gpus!r}")
        for name in ("memory_bytes", "peak_flops", "hbm_bytes_per_s"):
            if not 0 < getattr(self, name) < math.inf:
                raise UserInputError(f"cluster.{name} must be a finite number > 0, got {getattr(self, name)!r}")
        for name in ("alpha_base_s", "alpha_step_s"):
            if not 0 <= getattr(self, name) < math.inf:
                raise UserInputError(f"cluster.{name} (latency) must be a finite number >= 0, "
                                     f"got {getattr(self, name)!r}")
        missing = [c for c in COLLECTIVES if c not in self.busbw_bytes_per_s]
        if missing:
            raise UserInputError(f"cluster busbw is missing {', '.join(missing)}; needs {', '.join(COLLECTIVES)}")
        for c, v in self.busbw_bytes_per_s.items():
            if c not in COLLECTIVES:
                raise unknown_name("collective in cluster busbw", c, COLLECTIVES)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
                raise UserInputError(f"cluster busbw for {c} must be a finite number > 0, got {v!r}")
        for c, v in self.alpha_by_op_s.items():
            if c not in COLLECTIVES:
                raise unknown_name("collective in cluster alpha_us", c, COLLECTIVES)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf:
                raise UserInputError(f"cluster alpha_us for {c} must be a finite number >= 0, got {v!r}")
        self._check_step_terms()
        self._check_reserve()
        self._check_nodes()
        self._check_host()
        for name in ("busbw_size_curve", "gemm_efficiency", "attention_efficiency",
                     "attention_efficiency_causal"):
            pts = getattr(self, name)
            if not pts:
                raise UserInputError(f"cluster.{name} needs at least one (x, fraction) point")
            xs = [p[0] for p in pts]
            if xs != sorted(xs) or any(not 0 < p[1] <= 1 for p in pts) or any(not 0 < x < math.inf for x in xs):
                raise UserInputError(
                    f"cluster.{name} must be (x > 0, 0 < fraction <= 1) points in ascending x"
                )

    def _check_reserve(self) -> None:
        if isinstance(self.reserve_fraction, bool) or not 0 <= self.reserve_fraction < 1:
            raise UserInputError(f"cluster.reserve_fraction must be a number in [0, 1), got {self.reserve_fraction!r}")
        if isinstance(self.reserve_bytes, bool) or not 0 <= self.reserve_bytes:
            raise UserInputError(f"cluster.reserve_gib must be a number >= 0, got {self.reserve_bytes / GIB!r}")
        if self.plan_budget_bytes <= 0:
            raise UserInputError(f"cluster reserve ({self.reserve_bytes / GIB:.3g} GiB + {self.reserve_fraction:.3g} "
                                 f"of the memory) must leave memory to plan with ({self.memory_bytes / GIB:.3g} GiB)")

    def _check_nodes(self) -> None:
        """gpus_per_node, the inter-node link (one line naming the key)."""
        g = self.gpus_per_node
        if isinstance(g, bool) or not isinstance(g, int) or g < 0:
            raise UserInputError(f"cluster.gpus_per_node must be a whole number >= 1, got {g!r}")
        for name in ("inter_node_bytes_per_s", "inter_node_alpha_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf:
                key = "inter_node_bandwidth_gbps" if name == "inter_node_bytes_per_s" else "inter_node_latency_us"
                raise UserInputError(f"cluster.{key} must be a finite number >= 0, got {v!r}")
        if self.nodes == 1 and self.gpus % self.node_gpus == 0:
            return
        if self.gpus % self.node_gpus:
            raise UserInputError(f"cluster.gpus ({self.gpus}) must be a whole number of nodes of gpus_per_node "
                                 f"({self.node_gpus}) GPUs")
        if self.node_gpus & (self.node_gpus - 1):
            raise UserInputError(f"cluster.gpus_per_node must be a power of two on a cluster of several nodes "
                                 f"(groups are aligned power-of-two blocks of ranks), got {self.node_gpus}")
        if not self.inter_node_bytes_per_s:
            raise UserInputError(f"cluster of {self.nodes} nodes needs inter_node_bandwidth_gbps (GB/s per GPU "
                                 f"over its NIC): the NVLink numbers hold inside one node only")

    def _check_host(self) -> None:
        for name, key in (("host_link_bytes_per_s", "host_link_gbps"), ("host_memory_bytes", "host_memory_gib")):
            value = getattr(self, name)
            if isinstance(value, bool) or not 0 <= value < math.inf:
                raise UserInputError(f"cluster.{key} must be a finite number >= 0, got {value!r}")

    def _check_step_terms(self) -> None:
        for field_name, key in _STEP_TERM_KEYS:
            value = getattr(self, field_name)
            if isinstance(value, bool) or not 0 <= value < math.inf:
                raise UserInputError(f"cluster.{key} must be a finite number >= 0, got {value!r}")
        if isinstance(self.comm_overlap, bool) or not 0 <= self.comm_overlap <= 1:
            raise UserInputError(f"cluster.comm_overlap must be a number in [0, 1], got {self.comm_overlap!r}")
        for key, value in self.step_counts.items():
            ok = isinstance(value, (tuple, list)) and len(value) == 3 and all(
                not isinstance(v, bool) and isinstance(v, (int, float)) and 0 <= v < math.inf for v in value[::2])
            if not ok or not isinstance(value[1], (int, float)) or not math.isfinite(value[1]):
                raise UserInputError(f"cluster step_counts.{key} must be [launches >= 0, bytes_fixed, "
                                     f"bytes_per_token >= 0], got {value!r}")

    def busbw(self, collective: str, message_bytes: float) -> float:
        """Bus bandwidth (B/s) reached by `collective` at `message_bytes` (nccl-tests size convention)."""
        frac = interpolate_loglinear(self.busbw_size_curve, max(message_bytes, 1.0))
        return self.busbw_bytes_per_s[collective] * frac

    def alpha_s(self, collective: str, steps: int) -> float:
        """Latency of one call of `collective` taking `steps` ring steps: the measured per-kind value when the
        cluster has one, else alpha_base_s + alpha_step_s x steps."""
        if collective in self.alpha_by_op_s:
            return self.alpha_by_op_s[collective]
        return self.alpha_base_s + self.alpha_step_s * steps

    def gemm_eff(self, smallest_dim: int) -> float:
        """Fraction of peak a GEMM whose smallest dimension is `smallest_dim` reaches."""
        return interpolate_loglinear(self.gemm_efficiency, max(smallest_dim, 1))

    def attention_eff(self, seq_len: int, causal: bool) -> float:
        """Fraction of peak FlashAttention reaches (fwd+bwd) at `seq_len` keys per query block."""
        pts = self.attention_efficiency_causal if causal else self.attention_efficiency
        return interpolate_loglinear(pts, max(seq_len, 1))


A100_CUBES = ((1024, 119.4 / 312), (2048, 221.8 / 312), (4096, 228.0 / 312), (8192, 253.7 / 312),
              (16384, 256.5 / 312))
A100_ATTN = ((512, 151 / 312), (16384, 203 / 312))
A100_ATTN_CAUSAL = ((512, 99 / 312), (16384, 189 / 312))
A100_SIZE_CURVE = ((1 * MIB, 36 / 230), (16 * MIB, 109 / 230), (256 * MIB, 214 / 230), (2048 * MIB, 1.0))
H100_SIZE_CURVE = ((1 * MIB, 44 / 472), (16 * MIB, 234 / 472), (256 * MIB, 423 / 472), (2048 * MIB, 1.0))
HOPPER_GEMM_SCALE = (794.5 / 989) / (271.2 / 312)
HOPPER_CUBES = tuple((d, e * HOPPER_GEMM_SCALE) for d, e in A100_CUBES)
H100_ATTN = ((512, 335 / 989 * 151 / 203), (16384, 335 / 989))
H100_ATTN_CAUSAL = ((512, 335 / 989 * 99 / 189), (16384, 335 / 989))
ALLTOALL_OVER_ALLGATHER = 336 / 370


def _bw(ag: float, p2p: float, all_reduce: float | None = None) -> dict:
    """Busbw table in B/s from GB/s figures (see the module docstring for the sources)."""
    return {
        "all_gather": ag * GB, "reduce_scatter": ag * GB, "all_reduce": (all_reduce or ag) * GB,
        "all_to_all": ag * ALLTOALL_OVER_ALLGATHER * GB, "p2p": p2p * GB, "broadcast": ag * GB,
    }


A100_HDR_NIC_BYTES_PER_S = 91e9 / 4
"""Per GPU over one HDR InfiniBand NIC (200 Gb/s = 25 GB/s line rate [NAD], P): nccl-tests measured an
all_reduce busbw of 91 GB/s between two HGX A100 nodes through 4 HDR NICs (tests#100, M), 22.75 GB/s per NIC
(E)."""
NDR_NIC_BYTES_PER_S = 47e9
"""Per GPU over one NDR ConnectX-7 NIC (400 Gb/s = 50 GB/s line rate [POD], P): NCCL reaches 46-48 GB/s per NDR
NIC (tests#290, tests#267, M); the middle, 47 GB/s."""
NODE_COUNTS = (1, 2, 4, 16)
"""Nodes of the multi-node presets (`a100-80gb-2x8`, `h100-80gb-16x8`, ...; 1 node: `a100-80gb-x8`). A
multi-node preset's hardware (`device`: its bundled profiles) is its one-node preset's."""


def _node_name(name: str, nodes: int) -> str:
    """`a100-80gb-x8` for one node, `a100-80gb-4x8` for four."""
    return name if nodes == 1 else name.replace("-x", f"-{nodes}x")


PCIE_GEN4_X16_BYTES_PER_S = 32e9
"""A100 SXM's host link, per direction: PCIe Gen4 x16, 64 GB/s both ways [DS-A] (P; docs/hardware.md section 7)."""
PCIE_GEN5_X16_BYTES_PER_S = 64e9
"""H100 / H200 SXM's host link, per direction: PCIe Gen5 x16, 128 GB/s both ways [DS-H] (P; section 7)."""
A100_PINNED_COPY_BYTES_PER_S = 25.1e9
"""What a pinned host <-> A100 SXM4 copy reaches per direction, 25.1 of the link's 32 GB/s [NVB-A] (M;
docs/hardware.md section 7): the A100 presets' `host_link_gbps` (activation offload moves its bytes so)."""
HOPPER_PINNED_COPY_BYTES_PER_S = 52.8e9
"""What a pinned host <-> H100 SXM copy reaches per direction, 52.8 of the link's 64 GB/s: the slower of the two
directions measured [NVB-H] (M; docs/hardware.md section 7): the Hopper presets' `host_link_gbps`."""
DGX_A100_320_HOST_BYTES = 1 * 2**40
"""DGX A100 (8x 40 GB) system memory: 1 TB [DGX-A] (P; section 7)."""
DGX_2TB_HOST_BYTES = 2 * 2**40
"""DGX A100 640 GB, DGX H100 and DGX H200 system memory: 2 TB [DGX-A] [DGX-H] (P; section 7)."""


def _a100(name: str, mem_mib: int, hbm: float, nodes: int = 1) -> ClusterSpec:
    return ClusterSpec(
        name=_node_name(name, nodes), gpus=8 * nodes, gpus_per_node=8,
        gpu_name=f"A100-SXM4-{'80' if mem_mib > 50000 else '40'}GB",
        memory_bytes=mem_mib * MIB, peak_flops=312e12, hbm_bytes_per_s=hbm,
        busbw_bytes_per_s=_bw(230, 195, 231.6), busbw_size_curve=A100_SIZE_CURVE,
        gemm_efficiency=A100_CUBES, attention_efficiency=A100_ATTN,
        attention_efficiency_causal=A100_ATTN_CAUSAL, reserve_bytes=sourced_reserve_bytes(NCCL_A100_BYTES),
        inter_node_bytes_per_s=A100_HDR_NIC_BYTES_PER_S, base="" if nodes == 1 else name,
        host_link_bytes_per_s=A100_PINNED_COPY_BYTES_PER_S,
        host_memory_bytes=DGX_2TB_HOST_BYTES if mem_mib > 50000 else DGX_A100_320_HOST_BYTES,
        source="docs/hardware.md: [DS-A] [DQ] [AZ] tests#149 [LP] [TUNE] [FA2]; reserve: section 5; "
        "host: section 7 [NVB-A]; between nodes: [NAD] tests#100",
    )


def _hopper(name: str, gpu: str, mem_mib: int, hbm: float, ag: float, p2p: float, nodes: int = 1) -> ClusterSpec:
    return ClusterSpec(
        name=_node_name(name, nodes), gpus=8 * nodes, gpus_per_node=8, gpu_name=gpu, memory_bytes=mem_mib * MIB,
        peak_flops=989e12, hbm_bytes_per_s=hbm, busbw_bytes_per_s=_bw(ag, p2p), busbw_size_curve=H100_SIZE_CURVE,
        gemm_efficiency=HOPPER_CUBES, attention_efficiency=H100_ATTN,
        attention_efficiency_causal=H100_ATTN_CAUSAL, reserve_bytes=sourced_reserve_bytes(NCCL_HOPPER_BYTES),
        inter_node_bytes_per_s=NDR_NIC_BYTES_PER_S, base="" if nodes == 1 else name,
        host_link_bytes_per_s=HOPPER_PINNED_COPY_BYTES_PER_S, host_memory_bytes=DGX_2TB_HOST_BYTES,
        source="docs/hardware.md: [DS-H] [MLE-A] [MLE-N] [AZ] tests#212 nccl#2169 nccl#1264 [TUNE] [FA2]; "
        "memory: nvidia-smi (M); reserve: section 5; host: section 7 [NVB-H]; "
        "between nodes: [POD] tests#290 tests#267",
    )


PRESETS: dict[str, ClusterSpec] = {
    c.name: c
    for c in (
        *(_a100("a100-80gb-x8", 81251, 2039e9, n) for n in NODE_COUNTS),
        _a100("a100-40gb-x8", 40441, 1555e9),
        *(_hopper("h100-80gb-x8", "H100-SXM5-80GB", 81559, 3.35e12, 370, 371, n) for n in NODE_COUNTS),
        _hopper("h200-x8", "H200-SXM", 143771, 4.8e12, 365, 396),
    )
}
DEFAULT_CLUSTER = "a100-80gb-x8"

_TOML_SCALARS = {
    "name": str, "gpus": int, "gpu_name": str, "memory_gib": float, "peak_tflops": float,
    "hbm_gbps": float, "alpha_base_us": float, "alpha_step_us": float, "source": str,
    "launch_us": float, "runtime_launch_us": float, "collective_sync_us": float, "epilogue_ms": float,
    "comm_overlap": float, "counted_model": str, "state_gbps": float,
    "reserve_gib": float, "reserve_fraction": float, "host_link_gbps": float, "host_memory_gib": float,
    "nodes": int, "gpus_per_node": int, "inter_node_bandwidth_gbps": float, "inter_node_latency_us": float,
}
_TOML_CURVES = ("busbw_size_curve", "gemm_efficiency", "attention_efficiency",
                "attention_efficiency_causal")
TOML_KEYS = (tuple(_TOML_SCALARS) + ("busbw_gbps", "alpha_us") + _TOML_CURVES
             + ("base", "calibration", "provenance", "step_counts"))
CLUSTERS_DIR = Path(__file__).parent / "data" / "clusters"
"""Bundled cluster files (`NAME.toml`), e.g. the paper node calibrated on the authors' measurements."""


def load_cluster_toml(path: str | Path, _bases: tuple = ()) -> ClusterSpec:
    """Read a user cluster from TOML.

    Keys (units in the name): name, gpus, gpu_name, memory_gib, peak_tflops, hbm_gbps, alpha_base_us,
    alpha_step_us, source, a `[busbw_gbps]` table with one entry per collective kind, an optional
    `[alpha_us]` table of per-kind latencies (what `paradyse-lab calibrate` measures), and the curves as
    arrays of [x, fraction] pairs. `base = "PRESET"` (or another TOML file) starts from it and overrides only
    what is given. Every number must be finite; gpus a whole number. `[calibration.STRATEGY]` tables hold a
    `StrategyCalibration` each (`CALIBRATION_PARAMETERS`), as `paradyse-lab fit-calibration` writes them.
    A `[provenance]` table (host, device, software, date, command of a measured file) is for readers and
    ignored. `reserve_gib` and `reserve_fraction`: the memory kept out of every plan's budget
    (`ClusterSpec.plan_budget_bytes`). `host_link_gbps` (what a pinned copy over one GPU's PCIe link reaches,
    per direction) and `host_memory_gib` (the node's host memory): what activation offload is priced with.
    What `calibrate` also measures for the analytic model's step terms:
    `launch_us`, `state_gbps`, `comm_overlap`, `counted_model` and a `[step_counts]` table of KEY =
    [launches, bytes_fixed, bytes_per_token] (`ClusterSpec.step_counts`).
    """
    path = Path(path)
    if path.resolve() in _bases:
        raise UserInputError(f"cluster file {str(path)!r}: its base chain comes back to itself")
    data = _read_toml(path)
    for key in data:
        if key not in TOML_KEYS:
            raise unknown_name(f"key in {path.name}", key, TOML_KEYS)
    base = None
    if "base" in data:
        if not isinstance(data["base"], str):
            raise UserInputError(f"{path.name}: base must name a preset or a .toml file, got {data['base']!r}")
        base_file = cluster_file(data["base"])
        base = (load_cluster_toml(base_file, _bases + (path.resolve(),)) if base_file is not None
                else get_cluster(data["base"]))
    kw = {f.name: getattr(base, f.name) for f in fields(ClusterSpec)} if base else {}
    kw["name"] = path.stem
    if base is not None:
        kw["base"] = base.device
    scale = {"memory_gib": ("memory_bytes", 2**30), "peak_tflops": ("peak_flops", 1e12),
             "hbm_gbps": ("hbm_bytes_per_s", GB), "alpha_base_us": ("alpha_base_s", 1e-6),
             "alpha_step_us": ("alpha_step_s", 1e-6), "launch_us": ("launch_s", 1e-6),
             "runtime_launch_us": ("runtime_launch_s", 1e-6), "collective_sync_us": ("collective_sync_s", 1e-6),
             "epilogue_ms": ("epilogue_s", 1e-3),
             "state_gbps": ("state_bytes_per_s", GB), "reserve_gib": ("reserve_bytes", GIB),
             "host_link_gbps": ("host_link_bytes_per_s", GB), "host_memory_gib": ("host_memory_bytes", GIB),
             "inter_node_bandwidth_gbps": ("inter_node_bytes_per_s", GB),
             "inter_node_latency_us": ("inter_node_alpha_s", 1e-6)}
    for key, kind in _TOML_SCALARS.items():
        if key not in data:
            continue
        value = data[key]
        if kind is str and not isinstance(value, str):
            raise UserInputError(f"{path.name}: {key} must be a string, got {value!r}")
        if kind is not str and (isinstance(value, bool) or not isinstance(value, (int, float))
                                or not math.isfinite(value)):
            raise UserInputError(f"{path.name}: {key} must be a finite number, got {_toml_text(value)}")
        if kind is int and value != int(value):
            raise UserInputError(f"{path.name}: {key} must be a whole number, got {value!r}")
        if kind is int and value > MAX_GPUS:  # gpus, nodes, gpus_per_node: before nodes x gpus_per_node
            raise UserInputError(f"{path.name}: {key} must be a whole number up to {MAX_GPUS:,}, got {value!r}")
        if key in scale:
            kw[scale[key][0]] = _scaled_toml_value(path.name, key, value, *scale[key])
        else:
            kw[key] = kind(value)
    _resolve_nodes(data, kw, base, path.name)
    _collective_tables(data, kw, path.name)
    for key in _TOML_CURVES:
        if key in data:
            try:
                kw[key] = tuple((_toml_number(x), _toml_number(y)) for x, y in data[key])
            except (TypeError, ValueError):
                raise UserInputError(f"{path.name}: {key} must be an array of [x, fraction] pairs") from None
    if "calibration" in data:
        kw["calibration"] = _calibration(data["calibration"], path.name)
    if "step_counts" in data:
        if not isinstance(data["step_counts"], dict):
            raise UserInputError(f"{path.name}: step_counts must be a table of KEY = [launches, bytes_fixed, "
                                 "bytes_per_token]")
        kw["step_counts"] = {str(k): tuple(v) if isinstance(v, list) else v for k, v in data["step_counts"].items()}
    needed = {"gpus", "gpu_name", "memory_bytes", "peak_flops", "hbm_bytes_per_s", "busbw_bytes_per_s",
              *_TOML_CURVES}
    absent = sorted(n for n in needed if n not in kw)
    if absent:
        raise UserInputError(
            f"{path.name} lacks {', '.join(absent)} (give them, or start from a preset with base = NAME)"
        )
    return ClusterSpec(**kw)


_POSITIVE_TOML = ("memory_gib", "peak_tflops", "hbm_gbps")
"""Cluster TOML keys whose value must be > 0 (the others scaled by `_scaled_toml_value` may be 0)."""


def _scaled_toml_value(name: str, key: str, value, target: str, factor: float):
    """A cluster TOML number `value` of `key` in the unit of its `ClusterSpec` field `target` (`value` x `factor`;
    whole bytes for a memory). Checked here and shown as written, never as the bytes or seconds it would become:
    negative, beyond float range once scaled, or (the keys of `_POSITIVE_TOML`) not above 0 once scaled: -0.0,
    or 1e-300 GiB, which is 0 bytes."""
    if value < 0:
        raise UserInputError(f"{name}: {key} must be a finite number >= 0, got {value!r}")
    scaled = value * factor
    if not math.isfinite(scaled):
        raise UserInputError(f"{name}: {key} must be a finite number in range, got {value!r}")
    if target in ("memory_bytes", "reserve_bytes", "host_memory_bytes"):
        scaled = int(scaled)
    if key in _POSITIVE_TOML and not scaled > 0:
        least = " (at least one byte)" if target == "memory_bytes" and value > 0 else ""
        raise UserInputError(f"{name}: {key} must be a finite number > 0{least}, got {value!r}")
    return scaled


def _toml_text(value) -> str:
    """A TOML value as written: a date or time in its TOML form (1979-05-27), anything else as its repr."""
    return value.isoformat() if hasattr(value, "isoformat") else repr(value)


def _toml_number(value) -> float:
    """A TOML number as a float; a string or a boolean ("0.5", true) is a `TypeError`, not read as one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"not a number: {value!r}")
    return float(value)


def _resolve_nodes(data: dict, kw: dict, base: ClusterSpec | None, name: str) -> None:
    """`nodes`, `gpus_per_node` and `gpus` of a cluster file into `kw` (`gpus`, `gpus_per_node`).

    `nodes` x `gpus_per_node` GPUs (gpus_per_node from the base when not given); `gpus` alone, at most the base's
    node, is one node of that many GPUs. `gpus` beyond the base's node without node keys is refused: which of
    its GPUs share NVLink is not said, and planning them as one NVLink node would be wrong. A file without a
    base and without node keys is one node of `gpus` GPUs (its busbw are that node's links)."""
    nodes = kw.pop("nodes", None)
    if nodes is not None and nodes < 1:
        raise UserInputError(f"{name}: nodes must be a whole number >= 1, got {nodes!r}")
    if "gpus_per_node" in data and kw["gpus_per_node"] < 1:
        raise UserInputError(f"{name}: gpus_per_node must be a whole number >= 1, got {kw['gpus_per_node']!r}")
    per_node = kw.get("gpus_per_node") or (base.node_gpus if base is not None else kw.get("gpus"))
    if nodes is not None:
        if per_node is None:
            raise UserInputError(f"{name}: nodes needs gpus_per_node (or a base preset)")
        if "gpus" in data and data["gpus"] != nodes * per_node:
            raise UserInputError(f"{name}: gpus = {data['gpus']} but nodes x gpus_per_node = {nodes} x {per_node} "
                                 f"= {nodes * per_node}; give one or make them agree")
        kw["gpus"], kw["gpus_per_node"] = nodes * per_node, per_node
    elif "gpus" in data and "gpus_per_node" not in data:
        if base is not None and data["gpus"] > base.node_gpus:
            raise UserInputError(
                f"{name}: gpus = {data['gpus']} is more than one node of {base.device} ({base.node_gpus} GPUs "
                f"joined by NVLink); say how they are split: nodes = {-(-data['gpus'] // base.node_gpus)} "
                f"(and gpus_per_node, inter_node_bandwidth_gbps, inter_node_latency_us if not the base's)")
        kw["gpus_per_node"] = 0  # one node of `gpus`


def _read_toml(path: Path) -> dict:
    """The TOML table of the cluster file `path` (a one-line `UserInputError` when it cannot be read)."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark (an editor's) is no part of the TOML
        return tomllib.loads(text, parse_float=WrittenNumber)  # errors show the text
    except FileNotFoundError:
        raise UserInputError(f"cluster file {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise UserInputError(f"cluster file {str(path)!r} is a folder") from None
    except UnicodeDecodeError:
        raise UserInputError(f"cluster file {str(path)!r} is not UTF-8 text") from None
    except OSError as err:
        raise UserInputError(f"cluster file {str(path)!r} cannot be read: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise UserInputError(f"cluster file {str(path)!r} is not valid TOML: {err}") from None


def _collective_tables(data: dict, kw: dict, name: str) -> None:
    """`[busbw_gbps]` and `[alpha_us]` of a cluster file into `kw` (`busbw_bytes_per_s`, `alpha_by_op_s`)."""
    if "busbw_gbps" in data:
        if not isinstance(data["busbw_gbps"], dict):
            raise UserInputError(f"{name}: busbw_gbps must be a table of collective = GB/s")
        bw = dict(kw.get("busbw_bytes_per_s", {}))
        for c, v in data["busbw_gbps"].items():
            if c not in COLLECTIVES:
                raise unknown_name(f"collective in {name} busbw_gbps", c, COLLECTIVES)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
                raise UserInputError(f"{name}: busbw_gbps.{c} must be a finite number > 0, got {v!r}")
            bw[c] = float(v) * GB
        kw["busbw_bytes_per_s"] = bw
    if "alpha_us" in data:
        if not isinstance(data["alpha_us"], dict):
            raise UserInputError(f"{name}: alpha_us must be a table of collective = microseconds")
        alphas = {}
        for c, v in data["alpha_us"].items():
            if c not in COLLECTIVES:
                raise unknown_name(f"collective in {name} alpha_us", c, COLLECTIVES)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise UserInputError(f"{name}: alpha_us.{c} must be a number, got {v!r}")
            alphas[c] = float(v) * 1e-6
        kw["alpha_by_op_s"] = alphas


def _calibration(table, where: str) -> dict:
    """`[calibration.STRATEGY]` tables -> {strategy: StrategyCalibration}."""
    from paradyse_lab.strategies import CATALOG

    if not isinstance(table, dict):
        raise UserInputError(f"{where}: calibration must be a table of [calibration.STRATEGY] tables")
    out = {}
    for strategy, params in table.items():
        if strategy not in CATALOG:
            raise unknown_name(f"strategy in {where} calibration", strategy, CATALOG)
        if not isinstance(params, dict):
            raise UserInputError(f"{where}: calibration.{strategy} must be a table of "
                                 f"{', '.join(CALIBRATION_PARAMETERS)}")
        for key in params:
            if key not in CALIBRATION_PARAMETERS:
                raise unknown_name(f"key in {where} calibration.{strategy}", key, CALIBRATION_PARAMETERS)
        out[strategy] = StrategyCalibration(**params)
    return out


def bundled_clusters() -> list[str]:
    """Names of the cluster files shipped in paradyse_lab/data/clusters/."""
    return sorted(p.stem for p in CLUSTERS_DIR.glob("*.toml")) if CLUSTERS_DIR.is_dir() else []


def cluster_file(name_or_path: str) -> Path | None:
    """The TOML file a cluster name (`--cluster`, or a file's `base = ...`) reads: a bundled file by name, or
    a path; None for a preset (or a name that is neither: `get_cluster` refuses it)."""
    if name_or_path in PRESETS:
        return None
    if name_or_path in bundled_clusters():
        return CLUSTERS_DIR / f"{name_or_path}.toml"
    if name_or_path.endswith(".toml") or Path(name_or_path).is_file():
        return Path(name_or_path)
    return None


def base_chain(name_or_path: str) -> list[Path]:
    """Every TOML file the cluster `name_or_path` is read from: its own file, then its `base` file, that file's
    base, ... (empty for a preset). A cluster's numbers depend on every file of the chain, so a result keyed
    on the cluster is keyed on all of them (paradyse_lab/result_key.py). Stops at a preset, at a file that
    cannot be read as TOML, and where the chain comes back to a file already in it (the loader refuses those)."""
    chain: list[Path] = []
    current = cluster_file(name_or_path)
    while current is not None and current.resolve() not in {c.resolve() for c in chain}:
        chain.append(current)
        try:
            base = tomllib.loads(current.read_text(encoding="utf-8")).get("base")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            break
        current = cluster_file(base) if isinstance(base, str) else None
    return chain


def get_cluster(name_or_path: str) -> ClusterSpec:
    """A preset by name, a bundled cluster file by name, or a cluster read from a TOML file."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    path = cluster_file(name_or_path)
    if path is not None:
        return load_cluster_toml(path)
    raise unknown_name("cluster", name_or_path, list(PRESETS) + bundled_clusters() + ["<path to .toml>"])


MAX_GPUS_FLAG = 4096
"""Largest `--gpus` the commands accept (a cluster TOML's own count is bounded by `MAX_GPUS`)."""


def cluster_with_gpus(cluster: ClusterSpec, gpus: int | None) -> ClusterSpec:
    """`cluster` with `gpus` GPUs (`--gpus N`: another GPU count without writing a TOML file): the same GPU,
    links and calibration, named for its count ('a100-80gb-x8 at 4 GPUs'); its hardware (`device`, whose bundled
    profiles it uses) stays the original's. Up to one node's GPUs: one node of N; beyond: N / gpus_per_node
    nodes joined by the cluster's inter-node link (N must be a whole number of nodes, and the cluster must know
    its inter-node link). Counts `calibrate` measured at the original count (`step_counts`) apply at that
    count only (the analytic model checks `gpus`). None or the cluster's own count: `cluster`."""
    if gpus is None or gpus == cluster.gpus:
        return cluster
    require_positive_int("--gpus", gpus, MAX_GPUS_FLAG)
    per_node = cluster.node_gpus
    if gpus > per_node and (gpus % per_node or not cluster.inter_node_bytes_per_s):
        why = (f"a whole number of its {per_node}-GPU nodes" if gpus % per_node
               else "within one node (it has no inter_node_bandwidth_gbps)")
        raise UserInputError(f"--gpus {gpus}: cluster {cluster.name} takes GPU counts {why}")
    nodes = f", {gpus // per_node} nodes" if gpus > per_node else ""
    return replace(cluster, gpus=gpus, gpus_per_node=per_node if gpus > per_node else 0,
                   name=f"{cluster.name} at {gpus} GPUs{nodes}", base=cluster.device)
