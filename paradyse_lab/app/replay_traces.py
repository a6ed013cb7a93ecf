"""Traces of the runtime's operations for the replay cost model, made on meta tensors and cached.

`SublayerTraces(spec, p)` answers `trace(kind, option, seq_len, batch)`: the operations rank 0 of p issues for
one sub-layer's forward and backward, from the runtime's own code, so a change to the
runtime changes the prediction. Traces are cached by shape class: a sub-layer's operations at a length s are,
operator for operator, those at any other length of the class with every size affine in s (every block of
every strategy is a fixed fraction of s). `trace` records the class at three lengths (`BASE` x 1, 2, 3 units
of 2p positions), checks that each operation's sizes are affine through them (else it records s itself) and
instantiates the class at s without running anything. Traces are plain data (`Op`), which the pricing reads
without torch.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import os
import pickle
import time
from pathlib import Path

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.core.strategies import layout_unit
from paradyse_lab.costmodel.replay.ops import Op
from paradyse_lab.results.result_key import package_folder, source_files
from paradyse_lab.results.software_versions import software_versions

BASE = 32
"""Layout units (2p positions) of the class's first length: long enough that no block is degenerate."""
SIZES = ("m", "n", "k", "batch", "nbytes", "sq", "sk")


def cache_dir() -> Path:
    """Where shape classes are kept between processes: $PARADYSE_TRACE_CACHE, else ~/.cache/paradyse-lab/op-traces."""
    return Path(os.environ.get("PARADYSE_TRACE_CACHE") or Path.home() / ".cache" / "paradyse-lab" / "op-traces")


def runtime_digest(folder: Path | None = None) -> str:
    """A digest of the runtime's Python sources in every concept folder, names and contents (`folder`: default the
    installed runtime package's, read once per process: the runtime this process traces with is the one it
    imported): a cached trace is used only with the runtime that made it, so a change to any runtime module
    traces again."""
    if folder is None:
        return _installed_runtime_digest()
    h = hashlib.sha256()
    for f in source_files(folder, (".py",)):
        h.update(f.relative_to(folder).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


@functools.cache
def _installed_runtime_digest() -> str:
    return runtime_digest(package_folder("paradyse_lab.runtime"))


def runtime_config(spec: ModelSpec):
    """The model the runtime traces for a model spec's layers: the same layer, with learned positions that never
    run out and a vocabulary even a layer-only spec has."""
    return ModelSpec(vocab_size=max(spec.vocab_size, 2), max_positions=1 << 30, hidden=spec.hidden, heads=spec.heads,
                     layers=spec.layers, ffn_hidden=spec.ffn_hidden, causal=spec.causal, norm_eps=spec.norm_eps,
                     kv_heads=spec.kv_heads, norm=spec.norm, ffn_kind=spec.ffn_kind, bias=spec.bias,
                     qkv_bias=spec.qkv_bias, name="runtime")


@dataclasses.dataclass
class ShapeClass:
    """Three traces of one (kind, option, batch) at lengths s0 < s1 < s2, and whether they are affine in s."""

    lengths: tuple[int, int, int]
    traces: tuple[list[Op], list[Op], list[Op]]
    affine: bool

    def at(self, seq_len: int) -> list[Op]:
        """The trace at `seq_len`, each size extrapolated along the line through the first two lengths."""
        (s0, s1, _), (a, _, _) = self.lengths, self.traces
        out = list(a)
        for i, lines in self._lines():
            op = copy.copy(a[i])  # a plain copy: the sizes are set below, and Op's checks hold for them
            for f, v0, dv in lines:
                object.__setattr__(op, f, v0 + dv * (seq_len - s0) // (s1 - s0))
            out[i] = op
        return out

    def _lines(self) -> list[tuple[int, list[tuple[str, int, int]]]]:
        """Per operation whose sizes change with s: its index and (field, size at s0, change to s1)."""
        if getattr(self, "_changing", None) is None:
            a, b, _ = self.traces
            self._changing = [(i, lines) for i, (x, y) in enumerate(zip(a, b))
                              if (lines := [(f, getattr(x, f), getattr(y, f) - getattr(x, f)) for f in SIZES
                                            if getattr(x, f) != getattr(y, f)])]
        return self._changing


def _affine(lengths, traces) -> bool:
    (s0, s1, s2), (a, b, c) = lengths, traces
    if not (len(a) == len(b) == len(c)):
        return False
    for x, y, z in zip(a, b, c):
        if (x.kind, x.name, x.dtype, x.causal, x.kernel, x.which, x.ref) != (y.kind, y.name, y.dtype, y.causal,
                                                                             y.kernel, y.which, y.ref) or \
                dataclasses.replace(y, **{f: getattr(z, f) for f in SIZES}) != z:
            return False
        for f in SIZES:
            v0, v1, v2 = getattr(x, f), getattr(y, f), getattr(z, f)
            if (v1 - v0) * (s2 - s0) != (v2 - v0) * (s1 - s0):
                return False
    return True


_READ: dict[Path, ShapeClass] = {}
"""Shape classes this process read from the disk cache or wrote to it, by file: every `SublayerTraces` of the
process (one per cost model built) takes them from here instead of unpickling the file again (~10 ms each)."""


class SublayerTraces:
    """Cached traces of one model's sub-layers at p ranks on a `device` ('cuda', 'cpu': the attention kernels the
    runtime picks there) (module docstring)."""

    def __init__(self, spec: ModelSpec, p: int, device: str = "cuda"):
        self.spec, self.p, self.device = spec, p, device
        self.cfg = runtime_config(spec)
        self.classes: dict = {}
        self.exact: dict = {}
        self.trace_s = 0.0
        """Seconds spent tracing (the runtime's code on meta tensors), all calls together."""
        self.traced = 0
        self.digest = runtime_digest()
        self.torch_version = software_versions(("torch",), python=False)["torch"]  # other torch, other operators

    def _record(self, kind, option, seq_len, batch) -> list[Op]:
        # lazy: torch takes seconds to load; only this path runs it
        from paradyse_lab.runtime.trace.op_trace import trace_sublayer

        t0 = time.perf_counter()
        ops = trace_sublayer(self.cfg, kind, option, seq_len, self.p, batch, self.spec.dtype, device=self.device)
        self.trace_s += time.perf_counter() - t0
        self.traced += 1
        return ops

    def shape_class(self, kind: str, option, batch: int = 1) -> ShapeClass:
        key = (kind, option, batch)
        if key not in self.classes:
            settings = (self.digest, self.torch_version, dataclasses.astuple(self.spec)[1:-1], self.p, self.device,
                        key)
            name = hashlib.sha256(repr(settings).encode())
            path = cache_dir() / f"{name.hexdigest()[:24]}.pkl"
            if path in _READ:  # read or written by this process: the file's name holds every setting
                self.classes[key] = _READ[path]
                return self.classes[key]
            if path.is_file():
                with open(path, "rb") as f:
                    self.classes[key] = _READ[path] = pickle.load(f)
                return self.classes[key]
            unit = layout_unit(self.p)
            lengths = (BASE * unit, 2 * BASE * unit, 3 * BASE * unit)
            traces = tuple(self._record(kind, option, s, batch) for s in lengths)
            self.classes[key] = ShapeClass(lengths, traces, _affine(lengths, traces))
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            with open(tmp, "wb") as f:
                pickle.dump(self.classes[key], f)
            os.replace(tmp, path)
            _READ[path] = self.classes[key]
        return self.classes[key]

    def trace(self, kind: str, option, seq_len: int, batch: int = 1) -> list[Op]:
        """The operations of one sub-layer's forward and backward at `seq_len` (module docstring)."""
        cls = self.shape_class(kind, option, batch)
        if cls.affine and seq_len % layout_unit(self.p) == 0:
            return cls.at(seq_len)
        key = (kind, option, seq_len, batch)
        if key not in self.exact:
            self.exact[key] = self._record(kind, option, seq_len, batch)
        return self.exact[key]
