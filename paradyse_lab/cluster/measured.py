"""A `ClusterSpec` from measurements: alpha-beta fits of the collectives, kernel efficiency curves, TOML.

Library module of `paradyse-lab calibrate --out DIR`, which measures and calls
`measured_cluster_toml` to write DIR/cluster.toml; `--cluster DIR/cluster.toml` then loads it
(`load_cluster_toml`). No torch here.

- Collectives: per kind, t(S) = alpha + f(op, p) S / busbw (formulas.collective_time_s, nccl-tests
  convention: S the buffer, f = 2(p-1)/p for all_reduce, (p-1)/p for the gathers and scatters, 1 for p2p)
  fitted by non-negative least squares over the measured (S, median seconds). The file then holds one
  latency per kind (`[alpha_us]`) and a flat size curve (the latency already carries the small-message
  penalty).
- Across nodes (a run of several nodes): the collectives above are measured inside one
  node, and the rails (one rank per node, every rail at once) give the network's line, the one
  formulas.inter_node_time_s prices: t(S) = alpha_step x steps(op, nodes) + f(op, nodes) S / bandwidth, one
  per-step latency and one bandwidth per GPU's NIC fitted over every kind measured (`fit_inter_node`); the file
  then holds `nodes`, `gpus_per_node`, `inter_node_bandwidth_gbps` and `inter_node_latency_us`.
- Kernels: the peak is the fastest rate measured (GEMM or attention), so every efficiency is <= 1 and
  peak x efficiency is the measured rate. GEMM efficiency against the smallest dimension is the
  FLOP-weighted rate (total FLOPs / total seconds) of the GEMMs sharing that smallest dimension;
  attention efficiency against length, causal and not, the same over kernel calls.
- The step terms of the analytic model: the memory bandwidth of element-wise
  operators at the model's activation sizes, the seconds of one operator dispatch in training, the fraction
  of a ring's point-to-point time that hides behind compute, and the runtime's dispatches and memory-bound
  bytes counted per sub-layer, embedding / head and step epilogue
  for `counted_model`.
"""

from __future__ import annotations

import datetime as _dt
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from paradyse_lab.cluster.spec import COLLECTIVES
from paradyse_lab.costmodel.formulas import ALPHA_STEPS, BUSBW_FACTOR


@dataclass(frozen=True)
class AlphaBeta:
    """One collective kind's fit."""

    alpha_s: float
    """Latency per call, s."""
    busbw_bytes_per_s: float
    """Bus bandwidth (nccl-tests convention), B/s."""
    points: int
    """Measured sizes it was fitted on."""
    mape: float
    """Mean absolute percentage error of the fit on its own points (a fraction)."""


def fit_alpha_beta(op: str, ranks: int, sizes, seconds) -> AlphaBeta:
    """Non-negative least squares of t = alpha + f(op, ranks) S / busbw over (buffer bytes S, seconds)."""
    from scipy.optimize import nnls  # scipy: ~0.5 s to import, only when a fit runs

    s = np.asarray(sizes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if len(s) < 2 or np.ptp(s) == 0:
        raise ValueError(f"{op}: need at least two distinct sizes to fit alpha and beta")
    x = BUSBW_FACTOR[op](ranks) * s
    # Relative least squares (each row divided by its time): small messages matter as much as large ones.
    coef, _ = nnls(np.stack([np.ones_like(x), x], axis=1) / t[:, None], np.ones_like(t))
    alpha, inv_bw = float(coef[0]), float(coef[1])
    if inv_bw <= 0:  # flat in size (latency-bound everywhere): the largest message's rate bounds it
        inv_bw = float(np.min(t / x)) * 1e-3
    pred = alpha + x * inv_bw
    return AlphaBeta(alpha, 1.0 / inv_bw, len(s), float(np.mean(np.abs(pred - t) / t)))


def efficiency_points(samples, peak_flops: float) -> tuple[tuple[float, float], ...]:
    """(x, fraction of peak) per distinct x, ascending, from (x, flops, seconds) samples: FLOP-weighted rate."""
    flops, secs = defaultdict(float), defaultdict(float)
    for x, f, t in samples:
        flops[int(x)] += float(f)
        secs[int(x)] += float(t)
    return tuple((float(x), min(1.0, flops[x] / secs[x] / peak_flops)) for x in sorted(flops))


def best_rate(*sample_lists) -> float:
    """The fastest FLOP/s among (x, flops, seconds) samples."""
    return max(f / t for samples in sample_lists for _, f, t in samples if t > 0)


@dataclass
class Measurements:
    """What `paradyse-lab calibrate` measured on one machine, at world size `ranks`."""

    ranks: int
    gpu_name: str
    memory_bytes: int
    hbm_bytes_per_s: float
    gemm: list = field(default_factory=list)
    """(smallest dimension, flops, seconds) per GEMM."""
    attention: list = field(default_factory=list)
    """(kernel length, causal, flops, seconds) per attention call (fwd + bwd)."""
    collectives: dict = field(default_factory=dict)
    """op -> [(buffer bytes, median seconds)]."""
    provenance: dict = field(default_factory=dict)
    """host, device, software, date, command (strings)."""
    launch_s: float = 0.0
    """Seconds of one operator launch."""
    runtime_launch_s: float = 0.0
    """Seconds of one operator launch inside the runtime's own step (`ClusterSpec.runtime_launch_s`)."""
    collective_sync_s: float = 0.0
    """Seconds a blocking collective costs after compute beyond its own time (`ClusterSpec.collective_sync_s`)."""
    epilogue_s: float = 0.0
    """Seconds of the step epilogue on one rank (`ClusterSpec.epilogue_s`)."""
    comm_overlap: float = 1.0
    """Fraction of point-to-point time hidden behind a concurrent GEMM."""
    state_bytes_per_s: float = 0.0
    """Bandwidth of an add over buffers larger than the caches (the optimizer step's), B/s."""
    counted_model: str = ""
    """The model `step_counts` are of."""
    step_counts: dict = field(default_factory=dict)
    """KEY -> (launches, bytes_fixed, bytes_per_token) (`ClusterSpec.step_counts`)."""
    nodes: int = 1
    """Nodes of the `ranks` (equal blocks of consecutive ranks); `collectives` were measured inside one node."""
    inter_node: dict = field(default_factory=dict)
    """op -> [(buffer bytes, median seconds)] over the rails (one rank per node), when `nodes` > 1."""

    @property
    def node_ranks(self) -> int:
        """Ranks of one node: what `collectives` were measured over."""
        return self.ranks // self.nodes


def fit_collectives(m: Measurements) -> dict[str, AlphaBeta]:
    """One fit per measured collective kind (inside one node)."""
    return {op: fit_alpha_beta(op, m.node_ranks, [s for s, _ in pts], [t for _, t in pts])
            for op, pts in m.collectives.items() if len(pts) >= 2}


def fit_inter_node(nodes: int, points: dict) -> AlphaBeta:
    """One per-step latency and one bandwidth for every kind measured over the rails (`points`: op -> [(buffer
    bytes, seconds)]): non-negative least squares, relative, of t = alpha x steps(op, nodes) + f(op, nodes) S / bw
    (formulas.inter_node_time_s); `alpha_s` is the latency of one step."""
    from scipy.optimize import nnls  # scipy: ~0.5 s to import, only when a fit runs

    rows = [(ALPHA_STEPS[op](nodes), BUSBW_FACTOR[op](nodes) * s, t) for op, pts in points.items() for s, t in pts]
    if len({r[1] for r in rows}) < 2:
        raise ValueError("inter-node: need at least two distinct sizes to fit the latency and the bandwidth")
    a = np.array([[steps, x] for steps, x, _ in rows], dtype=float)
    t = np.array([r[2] for r in rows], dtype=float)
    coef, _ = nnls(a / t[:, None], np.ones_like(t))
    alpha, inv_bw = float(coef[0]), float(coef[1])
    if inv_bw <= 0:  # latency-bound everywhere: the largest message's rate bounds the bandwidth
        inv_bw = float(np.min(t / a[:, 1])) * 1e-3
    pred = a @ np.array([alpha, inv_bw])
    return AlphaBeta(alpha, 1.0 / inv_bw, len(rows), float(np.mean(np.abs(pred - t) / t)))


def _node_lines(m: Measurements) -> list[str]:
    """The cluster file's node keys (none for one node)."""
    if m.nodes == 1:
        return []
    link = fit_inter_node(m.nodes, m.inter_node)
    return [f"# Across nodes: {link.points} points over the rails of {m.nodes} nodes, fit error {link.mape:.1%}.",
            f"nodes = {m.nodes}", f"gpus_per_node = {m.node_ranks}",
            f"inter_node_bandwidth_gbps = {link.busbw_bytes_per_s / 1e9:.6g}",
            f"inter_node_latency_us = {link.alpha_s * 1e6:.6g}"]


def measured_cluster_toml(m: Measurements) -> str:
    """The text of a cluster file `load_cluster_toml` reads, from `m` (module docstring)."""
    att = [(x, f, t) for x, _, f, t in m.attention]
    peak = best_rate(m.gemm, att) if (m.gemm or att) else 1.0
    gemm = efficiency_points(m.gemm, peak) or ((1.0, 1.0),)
    plain = efficiency_points([(x, f, t) for x, c, f, t in m.attention if not c], peak) or gemm
    causal = efficiency_points([(x, f, t) for x, c, f, t in m.attention if c], peak) or plain
    fits = fit_collectives(m)
    if m.node_ranks > 1:
        missing = [op for op in COLLECTIVES if op not in fits]
        if missing:
            raise ValueError(f"no measurement of {', '.join(missing)} at {m.node_ranks} ranks")
    busbw = {op: (fits[op].busbw_bytes_per_s if op in fits else m.hbm_bytes_per_s) for op in COLLECTIVES}
    alpha = {op: fits[op].alpha_s for op in COLLECTIVES if op in fits}
    date = m.provenance.get("date") or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    lines = [
        "# Measured by `paradyse-lab calibrate` (paradyse_lab/cluster/measured.py); load with --cluster FILE.",
        f"# Collectives: alpha + f S / busbw fitted per kind at {m.node_ranks} ranks"
        + (" of one node" if m.nodes > 1 else "")
        + ("" if m.node_ranks > 1 else " (one rank: nothing to measure, busbw set to the memory bandwidth)") + ".",
        *(f"#   {op}: {len(m.collectives.get(op, []))} sizes, fit error {fits[op].mape:.1%}" for op in fits),
        f'name = "{_esc(m.provenance.get("name", "measured"))}"',
        f"gpus = {m.ranks}",
        *_node_lines(m),
        f'gpu_name = "{_esc(m.gpu_name)}"',
        f"memory_gib = {m.memory_bytes / 2**30:.6g}",
        f"peak_tflops = {peak / 1e12:.6g}",
        f"hbm_gbps = {m.hbm_bytes_per_s / 1e9:.6g}",
        "alpha_base_us = 0.0",
        "alpha_step_us = 0.0",
        f'source = "measured: {_esc(m.provenance.get("device", m.gpu_name))}, {date}"',
        f"launch_us = {m.launch_s * 1e6:.6g}",
        f"runtime_launch_us = {m.runtime_launch_s * 1e6:.6g}",
        f"collective_sync_us = {m.collective_sync_s * 1e6:.6g}",
        f"epilogue_ms = {m.epilogue_s * 1e3:.6g}",
        f"state_gbps = {m.state_bytes_per_s / 1e9:.6g}",
        f"comm_overlap = {min(max(m.comm_overlap, 0.0), 1.0):.6g}",
        f'counted_model = "{_esc(m.counted_model)}"',
        "busbw_size_curve = [[1.0, 1.0]]",
        f"gemm_efficiency = {_curve(gemm)}",
        f"attention_efficiency = {_curve(plain)}",
        f"attention_efficiency_causal = {_curve(causal)}",
        "",
        "[busbw_gbps]",
        *(f"{op} = {busbw[op] / 1e9:.6g}" for op in COLLECTIVES),
        "",
        "[alpha_us]",
        *(f"{op} = {alpha[op] * 1e6:.6g}" for op in alpha),
        "",
        "[step_counts]  # KEY = [launches, bytes_fixed, bytes_per_token] per training step",
        *(f'"{_esc(k)}" = [{int(v[0])}, {float(v[1]):.6g}, {float(v[2]):.6g}]' for k, v in m.step_counts.items()),
        "",
        "[provenance]",
        'source = "measured"',
        *(f'{k} = "{_esc(str(v))}"' for k, v in sorted(m.provenance.items()) if k != "name"),
        "",
    ]
    return "\n".join(lines)


def _curve(points) -> str:
    return "[" + ", ".join(f"[{x:.6g}, {y:.6g}]" for x, y in points) + "]"


def _esc(text: str) -> str:
    return str(text).replace("\\", "\\\\").replace('"', '\\"')
