"""GPU node descriptions (`ClusterSpec`) for the analytic cost model, and `StrategyCalibration`, what it adds
to the analytic model of one strategy.

The presets (with the sources of their numbers) and the reading of cluster TOML files and `--cluster` names
live beside this type. The
latency defaults (`alpha_base_s`, `alpha_step_s`, `inter_node_alpha_s`) are NCCL's tuning model constants
[TUNE] (Mdl, docs/hardware.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from paradyse_lab.errors import UserInputError, unknown_name

COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "p2p", "broadcast")
"""Collective kinds the cost model charges (p2p = one point-to-point send of a ring step)."""

MIB = 2**20
GIB = 2**30
GB = 1e9


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
    """What the analytic model misses for one strategy, fitted to measured times.

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
    power-of-two blocks of ranks), and an inter-node link (TOML `nodes`,
    `gpus_per_node`)."""
    inter_node_bytes_per_s: float = 0.0
    """Bandwidth each GPU reaches to the other nodes through its own NIC (rail-aligned: one NIC per GPU), B/s
    (TOML `inter_node_bandwidth_gbps`, GB/s); 0: no inter-node link known."""
    inter_node_alpha_s: float = 2.7e-6
    """Latency of one ring step over the network, s (TOML `inter_node_latency_us`): NCCL's tuning model
    charges 2.7 us per network step of a Ring LL collective [TUNE] (Mdl)."""
    step_counts: dict = field(default_factory=dict)
    """What the runtime launches and moves besides GEMMs, attention and collectives, counted by `calibrate`
    at this cluster's world size: key "OPTION.attention" / "OPTION.mlp"
    per strategy option, "fixed" (embedding, head, loss) and "optimizer" -> (launches, bytes_fixed,
    bytes_per_token); the analytic model prices them with `launch_s` and `hbm_bytes_per_s`. Empty for the
    presets."""
    kernels: str = field(default="", compare=False)
    """Folder of this machine's measured kernel tables (the replay cost model's): a cluster file's `kernels/`
    folder beside it, as `calibrate --out DIR` writes them; '' for the presets (their bundled tables, if any)."""

    @property
    def on_cpu(self) -> bool:
        """Whether the cluster's devices are a CPU host's ranks (`calibrate` on a CPU names them 'cpu ...', a
        training run's host cluster 'CPU, ...'): the runtime then runs the CPU's kernels and optimizer."""
        return self.gpu_name.lower().startswith("cpu")

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
