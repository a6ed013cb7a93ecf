"""The stages of `python -m paradyse_lab.app.measure.gpu_session --out DIR` (see that module for the command and the
files).

Library module. Each `stage_NAME(ctx, record)` writes its file(s) under ctx.session.out and fills `record`
(its entry in session_log.json); the session guards it, so an exception here is recorded, not fatal.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, replace

from paradyse_lab.app.measure.gpu_session_plan import REPO, MeasurementPlan, Session, device_kind, write_csv_atomic
from paradyse_lab.app.measure.gpu_validate import summarize, validate
from paradyse_lab.app.measure.kernel_bench import (
    ATTENTION_COLUMNS,
    GEMM_COLUMNS,
    bench_attention,
    bench_gemms,
    gemm_shapes,
)
from paradyse_lab.app.measure.profiler import device_name
from paradyse_lab.app.measure.replay_tables import Measurer, measure_tables
from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.cluster.presets import DEFAULT_CLUSTER
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import USABLE, StrategyOption
from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.files.atomic_write import write_text_atomic
from paradyse_lab.results.software_versions import software_versions, versions_text


@dataclass
class Context:
    """What every stage needs."""

    device: object
    """torch.device the run measures."""
    dtype: object
    """bf16 on CUDA, fp32 on CPU."""
    plan: MeasurementPlan
    quick: bool
    session: Session
    name: str
    """Device description written in every profile row."""
    total_bytes: int
    """Device memory (0 on CPU)."""
    kind: str
    """File-name label of the device (`h100-80gb`, `cpu`)."""
    cluster_name: str | None
    """The device's cluster preset, None when it has none (CPU)."""
    software: str
    """`name=version;...` written in every profile row."""


def context(device, plan: MeasurementPlan, quick: bool, session: Session) -> Context:
    import torch  # lazy: torch takes seconds to load; only this path runs it

    cuda = device.type == "cuda"
    name = device_name(device) if cuda else "cpu"
    total = torch.cuda.get_device_properties(device).total_memory if cuda else 0
    kind, cluster = device_kind(name, total)
    return Context(device=device, dtype=torch.bfloat16 if cuda else torch.float32, plan=plan, quick=quick,
                   session=session, name=name, total_bytes=total, kind=kind, cluster_name=cluster,
                   software=versions_text(software_versions(device=device)))


def _cluster(ctx: Context):
    """The cluster preset pricing modelled communication (the device's, else the default one)."""
    return get_cluster(ctx.cluster_name or DEFAULT_CLUSTER)


def _peak(ctx: Context) -> float | None:
    return _cluster(ctx).peak_flops if ctx.cluster_name else None


def _stage_deadline(ctx: Context, stage: str) -> float:
    s = ctx.session
    cap = min(ctx.plan.caps_s.get(stage, s.budget_s), 0.2 * s.budget_s)
    return min(time.perf_counter() + cap, s.deadline - min(10.0, 0.02 * s.budget_s))


def stage_env(ctx: Context, record: dict) -> None:
    import torch  # lazy: torch takes seconds to load; only this path runs it

    env = {"timestamp": ctx.session.log["started"], "device": ctx.name,
           "device_type": ctx.device.type, "device_kind": ctx.kind, "cluster_preset": ctx.cluster_name,
           "dtype": str(ctx.dtype).replace("torch.", ""), "versions": software_versions(device=ctx.device),
           "platform": platform.platform(), "cpu_threads": torch.get_num_threads(), "quick": ctx.quick,
           "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    if ctx.device.type == "cuda":
        props = torch.cuda.get_device_properties(ctx.device)
        free, _ = torch.cuda.mem_get_info(ctx.device)
        env.update(memory_bytes=props.total_memory, memory_gib=round(props.total_memory / 2**30, 2),
                   memory_free_bytes_at_start=free, capability=f"{props.major}.{props.minor}",
                   multiprocessors=props.multi_processor_count)
        try:
            env["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError) as err:
            env["nvidia_smi"] = f"unavailable: {err}"
    write_text_atomic(ctx.session.out / "env.json", json.dumps(env, indent=1))
    record["files"] = ["env.json"]
    ctx.session.say(f"env: {ctx.name} ({ctx.kind}, preset {ctx.cluster_name}); {ctx.software}")


def _run_command(ctx: Context, stage: str, cmd: list[str], record: dict) -> tuple[str, int | None]:
    """(output, exit code) of `cmd` run in the checkout until the stage's deadline; killed there (code None,
    the record 'partial')."""
    timeout = max(1.0, _stage_deadline(ctx, stage) - time.perf_counter())
    try:
        res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
        return res.stdout + res.stderr, res.returncode
    except subprocess.TimeoutExpired as err:
        text = "".join(x.decode() if isinstance(x, bytes) else (x or "") for x in (err.stdout, err.stderr))
        record["status"] = "partial"
        return text + f"\n[killed after {timeout:.0f} s: time budget]", None


PYTEST_GPU = ("-m", "pytest", "-q", "tests/gpu", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p",
              "no:xdist")
"""The pytest stage's command after the interpreter: tests/gpu in one process, without the plugins of property
tests and parallel workers that those tests do not use (hypothesis's plugin imports all of hypothesis: ~1.3 of
the ~4.2 CPU s the stage took on a machine without CUDA)."""


def stage_pytest(ctx: Context, record: dict) -> None:
    cmd = [sys.executable, *PYTEST_GPU]
    text, code = _run_command(ctx, "pytest", cmd, record)
    write_text_atomic(ctx.session.out / "pytest_gpu.txt", f"$ python {' '.join(cmd[1:])}\n{text}\nexit code: {code}\n")
    record.update(exit_code=code, files=["pytest_gpu.txt"], tail=text.strip().splitlines()[-1:] if text else [])


PEERS_CSV = "peers.csv"


def stage_peers(ctx: Context, record: dict) -> None:
    """examples/peer_benchmark.py (the runtime beside the torch-native peers, gloo ranks on this machine's CPUs,
    ours and the peer alternated) at the plan's lengths; its CSV is kept as peers.csv, its table in the log."""
    out = ctx.session.out / PEERS_CSV
    cmd = [sys.executable, "examples/peer_benchmark.py", "--lengths", ",".join(map(str, ctx.plan.peer_lengths)),
           "--repeats", str(ctx.plan.peer_repeats), "--out", str(out)]
    text, code = _run_command(ctx, "peers", cmd, record)
    record.update(command=" ".join(["python", *cmd[1:]]), exit_code=code, output=text.strip().splitlines()[-12:])
    if code not in (0, None):
        record["status"] = "error"
    if out.exists():
        record["files"] = [PEERS_CSV]


def stage_gemm(ctx: Context, record: dict) -> None:
    specs = [get_model(m) for m in ctx.plan.models]
    shapes = gemm_shapes(specs, ctx.plan.gemm_seqs, ctx.plan.p, ops=ctx.plan.gemm_ops)
    rows, skipped = bench_gemms(shapes, ctx.device, ctx.dtype, _peak(ctx), ctx.cluster_name or "",
                                _stage_deadline(ctx, "gemm"), ctx.quick)
    _finish_rows(ctx, record, "gemm.csv", rows, GEMM_COLUMNS, skipped)


def stage_attention(ctx: Context, record: dict) -> None:
    cases, seen = [], set()
    for m in ctx.plan.models:
        spec = get_model(m)
        key = (spec.heads // ctx.plan.p, spec.head_dim)  # the heads one rank runs under megatron_ts / ulysses_z
        if key not in seen:
            seen.add(key)
            cases.append((m, *key))
    rows, skipped = bench_attention(cases, ctx.plan.attention_seqs, ctx.device, ctx.dtype, _peak(ctx),
                                    ctx.cluster_name or "", _stage_deadline(ctx, "attention"), ctx.quick)
    _finish_rows(ctx, record, "attention.csv", rows, ATTENTION_COLUMNS, skipped)


def stage_kernels(ctx: Context, record: dict) -> None:
    """The replay model's tables (`replay_tables`) into DIR/kernels/: every GEMM and attention call
    the runtime's trace issues for each model at p ranks over the profile lengths, element-wise seconds by
    size and the per-operation dispatch cost; points past the stage's deadline are recorded as skipped."""
    deadline = _stage_deadline(ctx, "kernels")
    measurer = Measurer(ctx.device, ctx.dtype, lambda s: time.perf_counter() + s <= deadline,
                        repeats=ctx.plan.max_repeats)
    skipped, got = [], {}
    for m in ctx.plan.models:
        got = measure_tables(get_model(m), ctx.plan.p, ctx.plan.lengths, ctx.plan.replay_strategies, measurer,
                             ctx.session.out / "kernels")
        skipped += got["skipped"]
    record.update(rows=got.get("rows", {}), skipped=len(skipped), skipped_first=skipped[:5],
                  files=[f"kernels/{n}" for n in got.get("written", [])])
    if skipped:
        record["status"] = "partial" if got.get("written") else "skipped"
    ctx.session.say(f"kernels/: {got.get('rows')}, {len(skipped)} skipped")


def _finish_rows(ctx: Context, record: dict, name: str, rows, columns, skipped) -> None:
    record.update(rows=len(rows), skipped=len(skipped), skipped_first=skipped[:5])
    if rows:
        write_csv_atomic(ctx.session.out / name, rows, columns)
        record["files"] = [name]
    if skipped:
        record["status"] = "partial" if rows else "skipped"
    ctx.session.say(f"{name}: {len(rows)} rows, {len(skipped)} skipped")


def stage_profiles(ctx: Context, record: dict) -> None:
    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.app.measure.stack_profile import free_memory, profile_curve, rows_of_curve

    s = ctx.session
    end = s.deadline - min(8.0, 0.02 * s.budget_s)
    keep = [StrategyOption(n) for n in USABLE]
    passes = (("keep", keep, 0.7), ("recompute", [StrategyOption(n, True) for n in USABLE], 0.6), ("fill", keep, 1.0))
    rows: dict = {m: [] for m in ctx.plan.models}
    known: dict = {}  # (model, option name) -> {s: measured step seconds}
    ooms: dict = {}  # (model, option name) -> the length that ran out of memory
    files: set = set()
    for pass_name, options, share in passes:
        pass_end = time.perf_counter() + share * max(end - time.perf_counter(), 0.0)
        jobs = [(m, o) for m in ctx.plan.models for o in options]
        stack = None
        for i, (model, opt) in enumerate(jobs):
            entry = s.log["profiles"].setdefault(model, {}).setdefault(opt.name, {})
            if stack is None or stack.spec.name != model:
                stack = None  # released before the next one is built
                free_memory(ctx.device)
                try:
                    stack = _build_stack(ctx, model)
                except Exception as err:  # noqa: BLE001 - recorded per curve of this model
                    entry[pass_name] = {"error": f"building the stack: {type(err).__name__}: {err}"}
                    s.say(f"profiles {model}: ERROR building the stack: {err}")
                    continue
            deadline = time.perf_counter() + (pass_end - time.perf_counter()) / (len(jobs) - i)
            done = known.get((model, opt.name), {})
            lengths = ctx.plan.lengths if pass_name != "fill" else \
                _midpoints(sorted(done) + ([ooms[model, opt.name]] if (model, opt.name) in ooms else []))
            seed = done or known.get((model, opt.strategy)) or next(  # else any option of the model measured
                (v for (m, _), v in known.items() if m == model and v), {})
            try:
                res = profile_curve(stack, opt, list(lengths), deadline, seed, ctx.plan.max_repeats)
            except Exception as err:  # noqa: BLE001 - one curve's failure must not lose the others
                entry[pass_name] = {"error": f"{type(err).__name__}: {err}"}
                s.say(f"profiles {model} {opt.name} ({pass_name}): ERROR {err}")
                s.save_log()
                continue
            known.setdefault((model, opt.name), {}).update({x: p["compute_s"] for x, p in res["points"].items()})
            if res["oom_len"]:
                ooms[model, opt.name] = res["oom_len"]
            entry[pass_name] = {"measured": sorted(res["points"]), "oom_len": res["oom_len"], "skipped": res["skipped"]}
            s.say(f"profiles {model} {opt.name} ({pass_name}): measured {sorted(res['points'])}"
                  + (f", OOM at {res['oom_len']}" if res["oom_len"] else "")
                  + (f", {len(res['skipped'])} skipped" if res["skipped"] else ""))
            if res["points"]:
                rows[model] += rows_of_curve(stack, opt, res["points"], _analytic(ctx, stack), ctx.name,
                                             ctx.software, _cluster(ctx).name)
                files.add(_write_profile(ctx, model, rows[model]))
            s.save_log()
        stack = None
        free_memory(ctx.device)
    record.update(files=sorted(files), rows={m: len(r) for m, r in rows.items()})
    if not files:
        record["status"] = "skipped"


def _build_stack(ctx: Context, model: str):
    """The `LayerStack` of `model` (with the plan's layer count) on the device."""
    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.app.measure.stack_profile import LayerStack

    spec = get_model(model)
    return LayerStack(spec.with_layers(ctx.plan.layers) if ctx.plan.layers else spec, ctx.plan.p, ctx.device,
                      ctx.dtype)


def _analytic(ctx: Context, stack):
    dtype = "fp32" if str(stack.dtype) == "torch.float32" else "bf16"
    return AnalyticCostModel(replace(stack.spec, dtype=dtype), _cluster(ctx), stack.p)


def _midpoints(lengths: list[int]) -> list[int]:
    """(a + b) / 2 between consecutive lengths (1.5a on a doubling grid; the last pair may end at the length
    that ran out of memory, which narrows down the memory limit)."""
    return [(a + b) // 2 for a, b in zip(lengths, lengths[1:]) if (a + b) % 2 == 0]


def _write_profile(ctx: Context, model: str, rows: list[dict]) -> str:
    import pandas as pd  # lazy: pandas: slow to load, only this path needs it

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.app.measure.stack_profile import EXTRA_COLUMNS

    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.costmodel.profiles import COLUMNS, validate_profiles

    rows.sort(key=lambda r: (USABLE.index(r["strategy"]), r["recompute"], r["seq_len"]))
    validate_profiles(pd.DataFrame(rows)[list(COLUMNS)].astype(str), f"{model} rows")
    name = f"{ctx.kind}_{model}.csv"
    write_csv_atomic(ctx.session.out / name, rows, COLUMNS + EXTRA_COLUMNS)
    return name


def stage_summary(ctx: Context, record: dict) -> None:
    """Print the validation summary; writes no file (8 files come back at
    most)."""
    table = validate(ctx.session.out, cluster=None, write=False)
    for line in summarize(table):
        ctx.session.say(line)
    record["rows"] = len(table)
