"""Per-machine kernel tables the replay model prices operations from: GEMM time by (m, n, k, dtype) and attention
time by lengths, heads, head dimension and causality, read from the CSVs the measuring scripts write.

Interpolation (what the tables do between their rows):
- GEMM: the achieved throughput (flops / seconds) of the `NEIGHBOURS` rows of the same dtype nearest in
  (log m, log n, log k), weighted by inverse distance (log throughput averaged); time = flops / throughput. A
  product far below the grid's smallest takes the smallest rows' throughput, which holds their fixed cost.
- attention: per (causal, head dimension, direction), the throughput of the rows is interpolated piecewise
  linearly in log work (b x heads x sq x sk), held constant past either end; the closest head dimension (then
  causality) is used when the exact one was not measured. Non-square blocks (a ring's half blocks) are
  priced as bidirectional work of their size.
- element-wise (optional elementwise.csv, measured by `calibrate`): seconds against bytes read plus written,
  piecewise linear in log-log between the measured sizes; below the smallest its seconds (the kernel's fixed
  cost), above the largest its bandwidth.
- per-operation host costs (optional dispatch.csv, measured by `calibrate`): the seconds the host spends per
  traced operation in a training step, the fixed cost of the smallest kernel called bare (already inside that
  per-operation cost), and whether the host runs the kernels itself (a CPU: nothing overlaps the host).
The CSV columns of gemm.csv and attention.csv are those of `paradyse_lab.app.measure.gpu_session`'s (a GEMM row's
optional `batch` column multiplies its FLOPs); elementwise.csv and dispatch.csv are
`paradyse_lab.app.measure.replay_tables`'s.
"""

from __future__ import annotations

import bisect
import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tomllib

from paradyse_lab.costmodel.replay.ops import Op
from paradyse_lab.errors import UserInputError

NEIGHBOURS = 4


def _read(path: Path, needed: tuple[str, ...]) -> list[dict]:
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as err:
        raise UserInputError(f"kernel table {path}: {err.strerror}") from None
    missing = [c for c in needed if rows and c not in rows[0]]
    if not rows or missing:
        raise UserInputError(f"kernel table {path}: no rows, or missing columns {', '.join(missing)}")
    return rows


@dataclass
class GemmTable:
    """Measured GEMMs: (log m, log n, log k, log throughput) per dtype."""

    points: dict[str, list[tuple[float, float, float, float]]] = field(default_factory=dict)
    _arrays: dict = field(default_factory=dict, repr=False, compare=False)
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def read(cls, path: Path) -> GemmTable:
        table = cls()
        for r in _read(path, ("m", "n", "k", "dtype", "median_s")):
            m, n, k, t = int(r["m"]), int(r["n"]), int(r["k"]), float(r["median_s"])
            b = int(r.get("batch") or 1)  # a batched product's time covers b products
            table.points.setdefault(r["dtype"], []).append(
                (math.log(m), math.log(n), math.log(k), math.log(2.0 * b * m * n * k / t)))
        return table

    def seconds(self, op: Op) -> float:
        pts = self.points.get(op.dtype)
        if pts is None:  # another dtype's throughput would misprice it by the ratio of the two peaks
            raise UserInputError(f"the GEMM table holds {', '.join(sorted(self.points))}; the model's GEMMs run in "
                                 f"{op.dtype}: measure a table in {op.dtype} (or plan in a dtype the table holds)")
        key = (op.dtype, op.m, op.n, op.k)
        if key not in self._memo:
            self._memo[key] = self._log_throughput(op.dtype, pts, op.m, op.n, op.k)
        return op.flops / math.exp(self._memo[key]) if op.flops else 0.0

    def _log_throughput(self, dtype: str, pts, m: int, n: int, k: int) -> float:
        """Inverse-distance average of the `NEIGHBOURS` nearest rows' log throughput (module docstring)."""
        if dtype not in self._arrays:
            self._arrays[dtype] = np.array(pts, float)
        table = self._arrays[dtype]
        q = np.log([max(m, 1), max(n, 1), max(k, 1)])
        dist = np.sqrt(((table[:, :3] - q) ** 2).sum(axis=1))
        near = np.argsort(dist, kind="stable")[:NEIGHBOURS]
        weights = 1.0 / (1e-6 + dist[near])
        return float((weights * table[near, 3]).sum() / weights.sum())


@dataclass
class AttentionTable:
    """Measured attention calls: sorted (log work, log throughput) per (causal, head_dim, which)."""

    curves: dict[tuple[bool, int, str], list[tuple[float, float]]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> AttentionTable:
        table = cls()
        for r in _read(path, ("seq_len", "batch", "heads", "head_dim", "causal", "fwd_s", "bwd_s")):
            s, b, h, d = int(r["seq_len"]), int(r["batch"]), int(r["heads"]), int(r["head_dim"])
            causal = r["causal"].strip().lower() == "true"
            for which, col in (("forward", "fwd_s"), ("backward", "bwd_s")):
                op = Op("attention", "table", batch=b, sq=s, sk=s, heads=h, kv_heads=h, head_dim=d, causal=causal,
                        which=which)
                work = b * h * s * s
                table.curves.setdefault((causal, d, which), []).append(
                    (math.log(work), math.log(op.flops / float(r[col]))))
        for curve in table.curves.values():
            curve.sort()
        return table

    def seconds(self, op: Op) -> float:
        causal = op.causal and op.sq == op.sk
        keys = sorted(self.curves, key=lambda c: (c[2] != op.which, abs(math.log(c[1] / op.head_dim)),
                                                   c[0] != causal))
        curve = self.curves[keys[0]]
        x = math.log(max(1, op.batch * op.heads * op.key_pairs))
        xs = [p[0] for p in curve]
        i = bisect.bisect_left(xs, x)
        if i == 0:
            y = curve[0][1]
        elif i == len(curve):
            y = curve[-1][1]
        else:
            (x0, y0), (x1, y1) = curve[i - 1], curve[i]
            y = y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        return op.flops / math.exp(y)


@dataclass
class ElementwiseTable:
    """Measured element-wise kernels: sorted (log bytes, log seconds)."""

    curve: list[tuple[float, float]]

    @classmethod
    def read(cls, path: Path) -> ElementwiseTable:
        rows = _read(path, ("nbytes", "median_s"))
        return cls(sorted((math.log(int(r["nbytes"])), math.log(float(r["median_s"]))) for r in rows))

    def seconds(self, nbytes: int) -> float:
        curve = self.curve
        x = math.log(max(nbytes, 1))
        if x <= curve[0][0]:
            return math.exp(curve[0][1])
        if x >= curve[-1][0]:  # the largest size's bandwidth
            return math.exp(curve[-1][1] + x - curve[-1][0])
        i = bisect.bisect_left([p[0] for p in curve], x)
        (x0, y0), (x1, y1) = curve[i - 1], curve[i]
        return math.exp(y0 + (y1 - y0) * (x - x0) / (x1 - x0))


@dataclass(frozen=True)
class MeasuredHost:
    """Measured per-operation host costs (module docstring; dispatch.csv)."""

    dispatch_s: float
    """Host seconds per traced operation in a training step."""
    floor_s: float
    """Seconds of the smallest kernel called bare (inside `dispatch_s` already)."""
    serial: bool
    """The host runs every kernel itself (a CPU)."""

    @classmethod
    def read(cls, path: Path) -> MeasuredHost:
        r = _read(path, ("dispatch_s", "floor_s", "serial"))[0]
        return cls(float(r["dispatch_s"]), float(r["floor_s"]), r["serial"].strip().lower() == "true")


@dataclass
class KernelTables:
    """What one machine's tables give: GEMM and attention tables, optionally element-wise seconds and the
    measured per-operation host costs, and where they came from."""

    gemm: GemmTable
    attention: AttentionTable
    source: str
    elementwise: ElementwiseTable | None = None
    host: MeasuredHost | None = None
    derived: bool = False
    """The rows were derived from public specifications (`source=spec-derived`), not measured: `auto` does not
    price with them; `--cost-model replay` does, and says so in its label."""

    @classmethod
    def read(cls, folder: Path, source: str = "") -> KernelTables:
        folder = Path(folder)
        ew, host = folder / "elementwise.csv", folder / "dispatch.csv"
        derived = is_derived(folder)
        source = source or str(folder)
        return cls(GemmTable.read(folder / "gemm.csv"), AttentionTable.read(folder / "attention.csv"),
                   f"{source}, spec-derived, not measured" if derived else source,
                   ElementwiseTable.read(ew) if ew.is_file() else None,
                   MeasuredHost.read(host) if host.is_file() else None, derived)


SPEC_DERIVED = "spec-derived"
"""The `source` column of a table row derived from public specifications rather than measured."""


def is_derived(folder: Path) -> bool:
    """Whether the GEMM table in `folder` was derived from specifications (its first row's `source`)."""
    try:
        with open(Path(folder) / "gemm.csv", newline="") as f:
            first = next(csv.DictReader(f), None)
    except OSError:
        return False
    return bool(first) and first.get("source") == SPEC_DERIVED


BUNDLED = Path(__file__).resolve().parents[2] / "data" / "kernels"
"""Bundled tables, one folder per cluster preset device (README.md there says where each came from)."""


def bundled_tables(cluster_name: str) -> KernelTables | None:
    """The bundled kernel tables of a cluster preset (`h100-80gb-x8`), or None when none were measured."""
    folder = BUNDLED / cluster_name
    if not (folder / "gemm.csv").is_file():
        return None
    return KernelTables.read(folder, f"bundled {cluster_name} tables")


HOST_FILE = "dispatch.toml"
"""The host's per-operation costs in a kernel folder: `dispatch_us` (host microseconds per operation issued),
`sublayer_ops` (the runtime's Python per sub-layer, in operations), optionally `collective_us` (a collective
call's cost beyond its alpha-beta time) and `source` (where they came from)."""


@dataclass(frozen=True)
class HostCosts:
    """What the host charges the replay model: seconds per operation issued, and the runtime's Python per
    sub-layer in operations' worth."""

    dispatch_s: float
    sublayer_ops: int
    source: str
    collective_s: float = 0.0
    """Seconds each collective call and exchange costs beyond its alpha-beta time (TOML `collective_us`, default 0):
    the cluster's `collective_sync_s` as the replay model prices it."""

    @classmethod
    def read(cls, path: Path) -> HostCosts:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as err:
            raise UserInputError(f"{path}: {err}") from None
        dispatch, ops = data.get("dispatch_us"), data.get("sublayer_ops", 0)
        if not isinstance(dispatch, (int, float)) or not 0 < dispatch < 1e6 or isinstance(dispatch, bool):
            raise UserInputError(f"{path}: dispatch_us must be a number of microseconds > 0, got {dispatch!r}")
        if not isinstance(ops, int) or isinstance(ops, bool) or ops < 0:
            raise UserInputError(f"{path}: sublayer_ops must be a whole number >= 0, got {ops!r}")
        coll = data.get("collective_us", 0.0)
        if not isinstance(coll, (int, float)) or isinstance(coll, bool) or not 0 <= coll < 1e6:
            raise UserInputError(f"{path}: collective_us must be a number of microseconds >= 0, got {coll!r}")
        return cls(dispatch * 1e-6, ops, str(data.get("source", path)), coll * 1e-6)


def tables_folder(cluster) -> Path | None:
    """The kernel tables that price `cluster` (a `ClusterSpec`): those measured beside its cluster file, else the
    bundled ones of its hardware (`cluster.device`), else None."""
    if cluster.kernels:
        return Path(cluster.kernels)
    folder = BUNDLED / cluster.device
    return folder if (folder / "gemm.csv").is_file() else None


def host_costs(cluster, folder: Path) -> HostCosts | None:
    """The host costs of `cluster`: `folder`'s dispatch.toml, else the per-operator dispatch `calibrate` measured
    for the cluster (`runtime_launch_s`, else `launch_s`; no per-sub-layer Python), else None."""
    if (folder / HOST_FILE).is_file():
        return HostCosts.read(folder / HOST_FILE)
    measured = cluster.runtime_launch_s or cluster.launch_s
    if measured > 0:
        return HostCosts(measured, 0, f"dispatch {measured * 1e6:.1f} us per operation from {cluster.name}")
    return None


def replay_inputs(cluster) -> tuple[KernelTables, HostCosts] | str:
    """The tables and host costs the replay model prices `cluster` with, or why there are none."""
    folder = tables_folder(cluster)
    if folder is None:
        return f"no kernel tables for {cluster.device!r}"
    host = host_costs(cluster, folder)
    if host is None:
        return f"{folder} gives no {HOST_FILE} and {cluster.name!r} no measured launch cost"
    bundled = folder.parent == BUNDLED
    return KernelTables.read(folder, f"bundled {folder.name} tables" if bundled else f"tables in {folder}"), host

