"""Measure the replay cost model's kernel tables on the machine at hand, at the shapes the runtime issues.

Library module of `paradyse-lab calibrate` (its replay stage, into DIR/kernels/) and of the GPU session script (its
kernels stage). The shapes come from the runtime's own trace (`SublayerTraces`): every sub-layer
of the model under every strategy at p ranks, at every length asked for, so the tables hold what will be priced.
Recomputation replays the same forward, so the options without it give every shape. Files (`write_tables`;
`paradyse_lab.costmodel.replay.tables.KernelTables.read(folder)` reads them):

- gemm.csv (kernel_bench.GEMM_COLUMNS plus `batch`): every distinct traced (m, n, k, batch, dtype), timed as the
  product [b x] (m x k) @ (k x n); `matmul` is the aten operator, `layout` the strategy option that first issued
  it, `op` 'traced', `tokens` the step length it was first seen at;
- attention.csv (kernel_bench.ATTENTION_COLUMNS): every distinct traced attention call (batch, heads, lengths,
  head dimension, causality), forward and backward, with the kernel the runtime picked in the trace; a call whose
  query and key lengths differ (a ring's half block) is timed as the square non-causal call of the same work,
  as the table prices it;
- elementwise.csv (`ELEMENTWISE_COLUMNS`): an add (two inputs read, one output written) at `ELEMENTWISE_POINTS`
  sizes from the smallest to the largest bytes a traced element-wise operator moves;
- dispatch.csv (`DISPATCH_COLUMNS`): the seconds per traced operation of a training step's small-operator chain
  (calibrate_kernels.dispatch_chain, forward and backward with autograd; its operations counted by the same
  recorder as the trace), and the seconds of the smallest add called bare (the fixed cost inside it); the
  same dispatch cost in dispatch.toml (`tables.HOST_FILE`), the replay cost model's host costs.

Order and budget: lengths are visited coarse to fine (shortest, longest, middle, then the midpoints), so a
budget cut leaves shapes spread over the whole range (the GEMM table interpolates between its nearest rows);
each point is measured only if its predicted time fits (`fits`), and the points left are returned as skipped.
A rerun given the rows already measured (`done`) measures only the others.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import time
from collections.abc import Callable
from pathlib import Path

from paradyse_lab.app.measure.calibrate_kernels import dispatch_chain
from paradyse_lab.app.measure.gpu_session_plan import write_csv_atomic
from paradyse_lab.app.measure.kernel_bench import (
    ATTENTION_COLUMNS,
    GEMM_COLUMNS,
    KERNEL_LABELS,
    _attention_point,
    measure,
)
from paradyse_lab.app.replay_traces import SublayerTraces
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.replay.tables import HOST_FILE
from paradyse_lab.files.atomic_write import write_text_atomic

TABLE_GEMM_COLUMNS = GEMM_COLUMNS + ("batch",)
ELEMENTWISE_COLUMNS = ("op", "nbytes", "dtype", "median_s", "repeats", "bytes_per_s")
DISPATCH_COLUMNS = ("device", "dtype", "serial", "dispatch_s", "floor_s", "ops", "repeats")
ELEMENTWISE_POINTS = 8
LABEL_OF_KERNEL = {v: k for k, v in KERNEL_LABELS.items()}


def coarse_to_fine(values: list) -> list:
    """`values` (sorted) reordered: first, last, middle, then the midpoints of every gap, level by level."""
    if len(values) <= 2:
        return list(values)
    out, seen = [], set()
    spans = [(0, len(values) - 1)]

    def add(i):
        if i not in seen:
            seen.add(i)
            out.append(values[i])

    add(0)
    add(len(values) - 1)
    while spans:
        nxt = []
        for lo, hi in spans:
            if hi - lo > 1:
                mid = (lo + hi) // 2
                add(mid)
                nxt += [(lo, mid), (mid, hi)]
        spans = nxt
    return out


@dataclasses.dataclass
class TracedShapes:
    """What the trace issues: GEMM keys (m, n, k, batch, dtype) and attention keys (batch, heads, seq_len,
    head_dim, causal, kernel), each with where it was first seen, in measuring order; the element-wise bytes."""

    gemms: dict = dataclasses.field(default_factory=dict)
    attention: dict = dataclasses.field(default_factory=dict)
    elementwise_bytes: tuple[int, int] = (0, 0)


def traced_shapes(spec, p: int, lengths, device: str, strategies, fits: Callable[[float], bool] = lambda s: True
                  ) -> tuple[TracedShapes, list[str]]:
    """The shapes rank 0 of p issues for `spec`'s sub-layers under `strategies` at `lengths` on a `device`
    ('cpu', 'cuda'), from the runtime's trace (cached by shape class); (shapes, the options not traced when
    `fits(seconds of the last trace)` said no)."""
    traces = SublayerTraces(spec, p, device)
    shapes = TracedShapes()
    lo, hi = None, 0
    skipped, last = [], 0.0
    options = [StrategyOption(s) for s in strategies]
    for i, option in enumerate(options):
        if not fits(last):
            skipped += [o.name for o in options[i:]]
            break
        started = time.perf_counter()
        for s in coarse_to_fine(sorted(lengths)):
            for kind in ("attention", "mlp"):
                for op in traces.trace(kind, option, s):
                    if op.kind == "gemm":
                        shapes.gemms.setdefault((op.m, op.n, op.k, op.batch, op.dtype), (op.name, option.name, s))
                    elif op.kind == "attention":
                        n = op.sq if op.sq == op.sk else max(1, round((op.sq * op.sk) ** 0.5))
                        key = (op.batch, op.heads, n, op.head_dim, op.causal and op.sq == op.sk, op.kernel)
                        shapes.attention.setdefault(key, (option.name, s))
                    elif op.kind == "elementwise" and op.nbytes:
                        lo, hi = min(lo or op.nbytes, op.nbytes), max(hi, op.nbytes)
        last = time.perf_counter() - started
    shapes.elementwise_bytes = (lo or 0, hi)
    return shapes, skipped


@dataclasses.dataclass
class Measurer:
    """Times kernels on `device` in `dtype`: `fits(predicted seconds)` decides whether a point is measured (the
    same answer on every rank), `barrier()` lines the ranks up before each point."""

    device: object
    dtype: object
    fits: Callable[[float], bool]
    barrier: Callable[[], None] = lambda: None
    repeats: int = 3

    @property
    def dname(self) -> str:
        return str(self.dtype).replace("torch.", "")

    def _timing(self) -> dict:
        return {"warmup": 1, "max_repeats": max(self.repeats, 3), "min_repeats": self.repeats, "target_s": 0.05}

    def gemms(self, spec, shapes: TracedShapes, done: set) -> tuple[list[dict], list[str]]:
        """Rows of gemm.csv for the traced GEMMs not in `done` ((m, n, k, batch, dtype) keys); skipped keys."""
        import torch  # lazy: torch takes seconds to load; only this path runs it

        rows, skipped, rate = [], [], 0.0
        todo = [k for k in shapes.gemms if k not in done]
        for i, (m, n, k, b, dt) in enumerate(todo):
            flops = 2.0 * b * m * n * k
            if not self.fits((self.repeats + 2) * flops / rate if rate else 0.0):
                skipped += [f"gemm {x[:4]}" for x in todo[i:]]
                break
            gen = torch.Generator(device=self.device).manual_seed(0)
            a = torch.randn(b, m, k, device=self.device, dtype=self.dtype, generator=gen)  # [b, m, k]
            w = torch.randn(b, k, n, device=self.device, dtype=self.dtype, generator=gen)  # [b, k, n]
            fn = functools.partial(torch.bmm, a, w) if b > 1 else functools.partial(torch.mm, a[0], w[0])  # [b, m, n]
            self.barrier()
            sec, reps = measure(fn, self.device, **self._timing())
            rate = flops / sec
            name, option, s = shapes.gemms[(m, n, k, b, dt)]
            rows.append({"model": spec.name, "matmul": name, "layout": option, "op": "traced", "tokens": s,
                         "m": m, "n": n, "k": k, "batch": b, "dtype": self.dname, "median_s": f"{sec:.6g}",
                         "repeats": reps, "tflops": f"{flops / sec / 1e12:.4g}", "peak_tflops": "", "cluster": "",
                         "efficiency": ""})
        return rows, skipped

    def attention(self, spec, shapes: TracedShapes, done: set) -> tuple[list[dict], list[str]]:
        """Rows of attention.csv for the traced calls not in `done` (their keys), each with the kernel the
        trace recorded (the runtime's choice); smallest work first, so a budget cut keeps the short calls."""
        # lazy: torch takes seconds to load; only this path runs it
        from paradyse_lab.runtime.attention import kernels as attention

        rows, skipped, last, last_work = [], [], 0.0, 1.0
        todo = sorted((k for k in shapes.attention if k not in done), key=lambda k: k[0] * k[1] * k[2] ** 2)
        for i, (b, heads, s, d, causal, kernel) in enumerate(todo):
            work = b * heads * s * s
            if not self.fits(2 * last * work / last_work):
                skipped += [f"attention {x[:5]}" for x in todo[i:]]
                break
            name = LABEL_OF_KERNEL.get(kernel, kernel).split("+")[0]
            if name not in attention._KERNELS:  # an aten attention operator called directly: the runtime's kernel
                name = attention.kernel_for(self.device.type, self.dtype)
            fwd, bwd = attention._KERNELS[name]
            self.barrier()
            row, last = _attention_point(fwd, bwd, b * heads, s, d, causal, self.device, self.dtype,
                                         quick=self.repeats <= 1)
            last_work = work
            flops = 3.5 * 4.0 * s * s * b * heads * d / (2 if causal else 1)
            rows.append({"model": spec.name, "seq_len": s, "batch": b, "heads": heads, "head_dim": d,
                         "causal": str(causal).lower(), "kernel": KERNEL_LABELS.get(name, name), "dtype": self.dname,
                         "fwd_s": f"{row['fwd_s']:.6g}", "bwd_s": f"{row['bwd_s']:.6g}", "repeats": row["repeats"],
                         "tflops": f"{flops / last / 1e12:.4g}", "peak_tflops": "", "cluster": "", "efficiency": ""})
        return rows, skipped

    def elementwise(self, lo: int, hi: int) -> list[dict]:
        """Rows of elementwise.csv: an add at `ELEMENTWISE_POINTS` sizes from `lo` to `hi` bytes moved."""
        import torch  # lazy: torch takes seconds to load; only this path runs it

        item = torch.empty((), dtype=self.dtype).element_size()
        lo, hi = max(lo, 3 * item), max(hi, 3 * item)
        rows = []
        for j in range(ELEMENTWISE_POINTS):
            nbytes = lo * (hi / lo) ** (j / (ELEMENTWISE_POINTS - 1))
            numel = max(1, int(nbytes / (3 * item)))
            x, y = (torch.ones(numel, device=self.device, dtype=self.dtype) for _ in range(2))
            self.barrier()
            sec, reps = measure(functools.partial(torch.add, x, y), self.device, warmup=2, max_repeats=50,
                                min_repeats=self.repeats, target_s=0.02)
            moved = 3 * numel * item  # two read, one written
            rows.append({"op": "add", "nbytes": moved, "dtype": self.dname, "median_s": f"{sec:.6g}", "repeats": reps,
                         "bytes_per_s": f"{moved / sec:.4g}"})
        return rows

    def dispatch(self) -> dict:
        """The row of dispatch.csv (module docstring)."""
        import torch  # lazy: torch takes seconds to load; only this path runs it

        # lazy: torch takes seconds to load; only this path runs it
        from paradyse_lab.runtime.trace.op_trace import recording

        run = dispatch_chain(self.device, self.dtype)
        run()
        with recording() as rec:
            run()
        self.barrier()
        sec, reps = measure(run, self.device, warmup=2, max_repeats=50, min_repeats=max(self.repeats, 5),
                            target_s=0.05)
        x = torch.ones(1, device=self.device, dtype=self.dtype)
        floor, _ = measure(lambda: torch.add(x, x), self.device, warmup=5, max_repeats=200, min_repeats=20,
                           target_s=0.01)
        ops = max(len(rec.ops), 1)
        return {"device": self.device.type, "dtype": self.dname, "serial": str(self.device.type == "cpu").lower(),
                "dispatch_s": f"{sec / ops:.6g}", "floor_s": f"{min(floor, sec / ops):.6g}", "ops": ops,
                "repeats": reps}


def gemm_key(row: dict) -> tuple:
    """A gemm.csv row's key in `TracedShapes.gemms`."""
    return int(row["m"]), int(row["n"]), int(row["k"]), int(row.get("batch") or 1), row["dtype"]


def attention_key(row: dict) -> tuple:
    """An attention.csv row's key in `TracedShapes.attention` (the kernel by its runtime name)."""
    return (int(row["batch"]), int(row["heads"]), int(row["seq_len"]), int(row["head_dim"]),
            row["causal"] == "true", LABEL_OF_KERNEL.get(row["kernel"], row["kernel"]))


def trace_dtype(dtype) -> str:
    """The trace's dtype name (op_trace.DTYPES) of a torch dtype."""
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[str(dtype).replace("torch.", "")]


def read_rows(path) -> list[dict]:
    """A table's rows (none when the file is absent)."""
    if not Path(path).is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_tables(folder, gemm: list[dict], attention: list[dict], elementwise: list[dict], dispatch: dict) -> list[str]:
    """Write the four tables (atomically, each) into `folder`; the names written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, rows, columns in (("gemm.csv", gemm, TABLE_GEMM_COLUMNS), ("attention.csv", attention,
                                                                       ATTENTION_COLUMNS),
                                ("elementwise.csv", elementwise, ELEMENTWISE_COLUMNS),
                                ("dispatch.csv", [dispatch] if dispatch else [], DISPATCH_COLUMNS)):
        if rows:
            write_csv_atomic(folder / name, rows, columns)
            written.append(name)
    if dispatch:  # the replay cost model's host costs (tables.HOST_FILE): the measured dispatch, no fitted Python
        write_text_atomic(folder / HOST_FILE, f"dispatch_us = {float(dispatch['dispatch_s']) * 1e6:.6g}\n"
                          f"sublayer_ops = 0\nsource = \"dispatch {float(dispatch['dispatch_s']) * 1e6:.1f} us per "
                          f"operation measured on {dispatch['device']} by calibrate\"\n")
        written.append(HOST_FILE)
    return written


def measure_tables(spec, p: int, lengths, strategies, measurer: Measurer, folder, trace_fits=None, lead: bool = True,
                   share: Callable = lambda value: value) -> dict | None:
    """Trace, then measure every table into `folder` (rows already there are kept, not measured again); returns
    {"written", "skipped", "rows"} (skipped: what the budget left, as text). With several ranks timing at once:
    the `lead` rank traces (deciding with `trace_fits`, on its own), reads and writes `folder`, and `share`
    gives every rank its values (the others return None)."""
    spec = dataclasses.replace(spec, dtype=trace_dtype(measurer.dtype))
    folder = Path(folder)
    known = None
    if lead:
        shapes, skipped = traced_shapes(spec, p, lengths, measurer.device.type, strategies,
                                        trace_fits or measurer.fits)
        old = {n: read_rows(folder / n) for n in ("gemm.csv", "attention.csv", "elementwise.csv", "dispatch.csv")}
        known = (shapes, skipped, {gemm_key(r) for r in old["gemm.csv"]},
                 {attention_key(r) for r in old["attention.csv"]}, bool(old["elementwise.csv"]),
                 bool(old["dispatch.csv"]))
    shapes, skipped, done_g, done_a, have_ew, have_host = share(known)
    gemm, s1 = measurer.gemms(spec, shapes, done_g)
    att, s2 = measurer.attention(spec, shapes, done_a)
    ew = [] if have_ew else measurer.elementwise(*shapes.elementwise_bytes)
    host = None if have_host else measurer.dispatch()
    if not lead:
        return None
    gemm, att = old["gemm.csv"] + gemm, old["attention.csv"] + att
    ew, host = ew or old["elementwise.csv"], host or old["dispatch.csv"][0]
    return {"written": write_tables(folder, gemm, att, ew, host), "skipped": skipped + s1 + s2,
            "rows": {"gemm": len(gemm), "attention": len(att), "elementwise": len(ew)}}
