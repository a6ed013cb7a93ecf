"""Profile the runtime: time, peak memory and kept activations of every strategy per sequence length.

Commands:

    # rank-local: one process plays rank 0 of a p-GPU world through a fake process group
    paradyse-lab costmodel profile --model gpt2-tiny --seqs 512,1024 --strategies megatron_ts,metp+recompute \\
        --mode rank-local --p 8 --out profile.csv
    # distributed: every rank runs its share for real (NCCL on GPUs, gloo on CPU); rank 0 writes
    torchrun --standalone --nproc-per-node 8 -m paradyse_lab costmodel profile --model gpt2-tiny --seqs 512,1024 \\
        --strategies megatron_ts,metp --mode distributed --out profile.csv
    # (inside a process group that is already set up, call `profile_distributed`: the tests do, on gloo)

One row per (strategy option, sequence length), in the cost model's profile schema: one training
step (forward + backward, no optimizer step) of the whole `ParallelGPT` (embedding, the layer stack with
the option on every layer, tied head and loss), seen from one rank. `--warmup` untimed steps, then
`--repeats` timed ones; time_s is their median (CUDA events on GPU, `time.perf_counter` on CPU).
- `measured-distributed`: the median of each rank's steps, max over ranks; peak_bytes the max over ranks
  of `torch.cuda.max_memory_allocated` (reset before the timed steps).
- `measured-rank-local`: `FakeGroup` makes every collective return a correctly
  shaped tensor without communicating, so the rank's compute time and memory are real and its
  communication is absent; time_s = measured compute + the communication the analytic model
  (alpha-beta per collective on `--cluster`, ring overlap included)
  leaves exposed. That part is modelled, and the extra columns `compute_s`, `comm_s`, `comm_modelled`
  (ignored by the profile reader) say so. In distributed rows compute_s is the whole measured step
  (communication included), comm_s is 0 and comm_modelled false.
- peak_bytes has the cost model's meaning: every model state is resident while
measuring
  (`resident_model_states` in `profile_memory`: gradients allocated and accumulated into, the optimizer states as one
  untouched buffer, 16 bytes per parameter in all), and the peak counter is reset (`reset_peak`, `profile_memory`)
  after the kept-bytes forward's graph is freed. On CPU there is no allocator peak counter: peak_bytes = model-state
  bytes + kept_bytes, a lower bound (the transient working memory is not seen; `peak_method` lower-bound-cpu). Use GPU
  rows for peak memory.
- attention_kernel: the attention kernels that actually ran for the row
  (`kernels_used`: flash_attn, sdpa_flash, sdpa_cpu or math; joined by '+' if a fused one fell back mid-row).

kept_bytes (`measure_kept_bytes`, `profile_memory`) is exact on every device: the bytes of the distinct storages that
the forward hands to autograd for backward (`torch.autograd.graph.saved_tensors_hooks`), parameters excluded.
Rows are written atomically (a temporary file renamed over `--out`). Bad input (unknown strategy or model,
a length that is not a multiple of 2p, shapes a strategy cannot split) exits 2 with one line.

What every row of one `paradyse-lab costmodel profile` call measures with (whose
module docstring is the command's --help): the model on its torch device, its strategy options, its resident model
states (`resident_model_states`, `profile_memory`), the cost model that prices a rank-local row's communication,
and the device's name as the rows record it (`device_name`). Every input error is raised here, before any timing.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field

from paradyse_lab.app.measure.profile_memory import KeptRecorder, reset_peak, resident_model_states
from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.cluster.presets import DEFAULT_CLUSTER
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel import formulas as F
from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.errors import UserInputError
from paradyse_lab.files.atomic_write import atomic_open
from paradyse_lab.results.software_versions import software_versions, versions_text
from paradyse_lab.runtime.comm.fake_group import FakeGroup

MODES = ("rank-local", "distributed")


# --- timing ---------------------------------------------------------------------------------------------

def _timed_steps(step, warmup: int, repeats: int, cuda: bool, barrier=None) -> list[float]:
    """Seconds of each of `repeats` calls of `step` after `warmup` untimed ones."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        if barrier is not None:
            barrier()
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
    return times


# --- the command ----------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class ProfileOptions:
    """One profiling run. Each field is one flag of `profile` (the fields and the
    docstrings under them become the flags and their help); --out is the command's own."""

    model: str = "gpt2-tiny"
    """Model preset or config.json (GPT-2-shaped)."""
    seqs: tuple[int, ...]
    """Comma-separated sequence lengths (multiples of the layout unit: 2p, any length when p = 1)."""
    strategies: tuple[str, ...]
    """Comma-separated NAME or NAME+recompute."""
    mode: str = field(default="rank-local", metadata={"choices": MODES})
    """rank-local: one process plays one rank of a p-GPU world; distributed: every rank runs its share."""
    p: int = 0
    """rank-local: the world size to emulate (required); distributed: the world size (taken from it)."""
    rank: int = 0
    """rank-local: the rank this process plays."""
    batch: int = 1
    """Sequences per step."""
    layers: int = 0
    """Layers to run (0: the model's)."""
    warmup: int = 2
    """Untimed steps before timing."""
    repeats: int = 5
    """Timed steps (their median is reported)."""
    device: str = field(default="auto", metadata={"choices": ("auto", "cpu", "cuda")})
    """auto: CUDA when available, else CPU."""
    dtype: str = field(default="auto", metadata={"choices": ("auto", "fp32", "bf16", "fp16")})
    """auto: bf16 on CUDA, fp32 on CPU."""
    cluster: str = ""
    """Cluster preset pricing the modelled communication (rank-local; '': the default preset)."""
    seed: int = 0
    """Seed of the initial weights and the tokens."""


def _modelled_comm_s(run: Profiling, opt, s: int) -> float:
    """A rank-local row's communication: the analytic schedule's exposed time (alpha-beta, ring overlap) of
    every sub-layer, and the embedding gradients' all-reduce."""
    att = run.analytic.sublayer("attention", opt, s, run.opts.batch)
    mlp = run.analytic.sublayer("mlp", opt, s, run.opts.batch)
    spec = run.analytic.model
    return run.cfg.layers * (att.exposed_comm_s + mlp.exposed_comm_s) + F.collective_call_s(
        run.analytic.cluster, "all_reduce", F.embedding_params(spec) * spec.dtype_bytes, run.p)


def _profile_row(run: Profiling, opt, s: int, gen) -> dict:
    """One profile row: option `opt` at length `s`, its kept bytes from one forward, its median step time."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.attention import kernels as attention

    opts, cfg, model, device = run.opts, run.cfg, run.model, run.device
    t = s // run.p
    ids = torch.randint(0, cfg.vocab_size, (opts.batch, t), generator=gen).to(device)
    labels = torch.randint(0, cfg.vocab_size, (opts.batch, t), generator=gen).to(device)
    plan = [str(opt)] * cfg.layers

    def step():  # gradients stay resident and accumulate
        loss = model(ids, plan, labels)[1]  # the logits dropped at once, as training does
        loss.backward()

    with attention.kernels_used() as ran:
        with KeptRecorder(exclude=run.params) as rec:  # kept bytes of one forward (exact)
            logits, loss = model(ids, plan, labels)
        kept = rec.nbytes
        del logits, loss, rec  # the whole graph of that forward, before the peak is reset
        reset_peak(device)
        times = _timed_steps(step, opts.warmup, opts.repeats, device.type == "cuda", run.barrier)
    compute_s = statistics.median(times)
    # CPU: a lower bound (module docstring)
    peak = int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else run.state_bytes + kept
    comm_s = 0.0
    if run.distributed:
        vals = torch.tensor([compute_s, float(peak)], dtype=torch.float64,
                            device=device if device.type == "cuda" else "cpu")
        torch.distributed.all_reduce(vals, op=torch.distributed.ReduceOp.MAX, group=run.group)  # [2], slowest rank
        compute_s, peak = float(vals[0]), int(vals[1])
    elif run.p > 1:
        comm_s = _modelled_comm_s(run, opt, s)
    return {
        "model": opts.model, "h": cfg.hidden, "heads": cfg.heads, "kv_heads": cfg.kv_heads, "layers": cfg.layers,
        "p": run.p, "strategy": opt.strategy, "recompute": "true" if opt.recompute else "false", "seq_len": s,
        "batch": opts.batch, "time_s": compute_s + comm_s, "peak_bytes": max(peak, kept), "kept_bytes": kept,
        "device": run.dev_name, "source": "measured-distributed" if run.distributed else "measured-rank-local",
        "software": run.software, "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "compute_s": compute_s, "comm_s": comm_s, "comm_modelled": "false" if run.distributed else "true",
        "attention_kernel": "+".join(sorted(ran)), "state_bytes": run.state_bytes,
        "peak_method": "max_memory_allocated" if device.type == "cuda" else "lower-bound-cpu",
    }


def profile(opts: ProfileOptions, group=None, progress: bool = True):
    """Profile rows (a DataFrame, profiles.COLUMNS plus compute_s, comm_s, comm_modelled) for `opts`.

    rank-local: `group` is ignored (a `FakeGroup` of opts.p is used). distributed: torch.distributed must be
    initialised; every rank calls this, every rank gets the rows."""
    import pandas as pd  # lazy: pandas: slow to load, only this path needs it
    import torch  # lazy: torch takes seconds to load; only this path runs it

    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.costmodel.profiles import COLUMNS, validate_profiles

    run = set_up_profiling(opts, group)
    jobs = [(opt, s) for opt in run.options for s in opts.seqs]
    bar = None
    if progress and run.rank == 0:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), desc="profile", file=sys.stderr, dynamic_ncols=True)
    rows = []
    gen = torch.Generator().manual_seed(opts.seed)
    for opt, s in jobs:
        if bar is not None:
            bar.set_postfix_str(f"{opt} s={s}")
        rows.append(_profile_row(run, opt, s, gen))
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    df = pd.DataFrame(rows)
    validate_profiles(df[list(COLUMNS)].astype(str), "profiled rows")
    return df


def write_rows_atomic(df, path: str) -> None:
    """Write the rows (schema columns first, then the extra ones) to `path` atomically."""
    from paradyse_lab.costmodel.profiles import COLUMNS  # lazy: pandas: slow to load, only this path needs it

    cols = list(COLUMNS) + [c for c in df.columns if c not in COLUMNS]
    out = df[cols].copy()
    for c in ("time_s", "compute_s", "comm_s"):
        out[c] = out[c].map(lambda v: f"{v:.6g}")
    with atomic_open(path) as f:
        out.to_csv(f, index=False)


def profile_distributed(opts: ProfileOptions, out: str, group=None, progress: bool = True):
    """`--mode distributed` inside an initialised process group (torchrun's, or a test's): every rank
    profiles its share, rank 0 of `group` writes the rows to `out`; every rank returns them."""
    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import collectives as comm

    df = profile(opts, group, progress)
    if comm.rank(group) == 0:
        write_rows_atomic(df, out)
    return df


def device_name(device) -> str:
    import torch  # lazy: torch takes seconds to load; only this path runs it

    if device.type == "cuda":
        return torch.cuda.get_device_name(device).replace(",", " ")
    return (f"cpu {platform.machine()} {platform.processor()}".strip()).replace(",", " ") or "cpu"


@dataclass
class Profiling:
    """What every row of one `profile` call measures with: the model on its device, its strategy options and
    the cost model that prices a rank-local row's communication."""

    opts: ProfileOptions
    cfg: object
    model: object
    options: list
    group: object
    p: int
    rank: int
    device: object
    distributed: bool
    analytic: object
    params: list
    state_bytes: int
    optimizer_states: object
    """The optimizer states' buffer (`resident_model_states`), held while profiling."""
    barrier: object
    software: str
    dev_name: str


def _profile_device(opts: ProfileOptions, distributed: bool):
    """The torch device `opts` asks for (`--device auto`: CUDA when there is one) and its dtype's name."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    use_cuda = opts.device == "cuda" or (opts.device == "auto" and torch.cuda.is_available())
    if use_cuda and not torch.cuda.is_available():
        raise UserInputError("--device cuda but CUDA is not available")
    if use_cuda:
        device = torch.device("cuda", torch.cuda.current_device()) if not distributed else \
            torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    else:
        device = torch.device("cpu")
    return device, opts.dtype if opts.dtype != "auto" else ("bf16" if device.type == "cuda" else "fp32")


def set_up_profiling(opts: ProfileOptions, group) -> Profiling:
    """The model, options and states of a `profile` call, every input error raised before any timing."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import collectives as comm

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.model.layout import check_length
    from paradyse_lab.runtime.model.parallel_gpt import ParallelGPT  # lazy: safetensors: only checkpoint paths need it

    spec = get_model(opts.model)
    if opts.layers:
        spec = spec.with_layers(opts.layers)
    cfg = spec
    distributed = opts.mode == "distributed"
    if distributed:
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            raise UserInputError("--mode distributed runs under torchrun (torch.distributed is not initialised)")
        p, rank = comm.size(group), comm.rank(group)
    else:
        p, rank = opts.p, opts.rank
        group = FakeGroup(p, rank)
    device, dtype_name = _profile_device(opts, distributed)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    options = [StrategyOption.parse(s) for s in opts.strategies]
    model = ParallelGPT(cfg, group, seed=opts.seed).to(device=device, dtype=dtype)
    for s in opts.seqs:  # every input error before any timing
        check_length(s, p)
        for opt in options:
            model.check(s, [str(opt)] * cfg.layers)
    cost_spec = cfg.with_dtype(dtype_name if dtype_name != "fp16" else "bf16")
    params = list(model.parameters())
    optimizer_states, state_bytes = resident_model_states(params, cost_spec, device)
    barrier = (lambda: torch.distributed.barrier(group=group)) if distributed else None
    return Profiling(opts, cfg, model, options, group, p, rank, device, distributed,
                      AnalyticCostModel(cost_spec, get_cluster(opts.cluster or DEFAULT_CLUSTER), p), params,
                      state_bytes, optimizer_states, barrier, versions_text(software_versions(device=device)),
                      device_name(device))


if __name__ == "__main__":  # the command line lives in paradyse_lab/cli/; refuse instead of doing nothing
    import sys

    print("error: run `paradyse-lab costmodel profile ...` (or `torchrun --nproc-per-node N -m paradyse_lab "
          "costmodel profile ...`); this module is a library", file=sys.stderr)
    raise SystemExit(2)
