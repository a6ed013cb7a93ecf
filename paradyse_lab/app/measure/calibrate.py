"""`paradyse-lab calibrate`: measure the machine it runs on and write a cluster file and a measured profile.

    paradyse-lab calibrate --out DIR              # defaults suit the machine (CPU: gpt2-cpu, p = 2, 6 min)
    paradyse-lab calibrate --out DIR --nproc 8 --model gpt2 --max-len 1024 --budget-s 540   # a GPU node
    torchrun --standalone --nproc-per-node 8 -m paradyse_lab calibrate --out DIR             # the same

Everything is measured through the project's runtime on p ranks (gloo on CPU, NCCL on GPUs), every rank
working at once as in training; rank 0 writes. Stages, in order, each with a share of `--budget-s`
(a stage stops measuring when its next point would not fit, and says so in DIR/calibrate.json):

1. collectives (10%): every kind the strategies use, through the runtime's collectives (all_gather, reduce_scatter,
   all_reduce, all_to_all) and point-to-point exchanges (the ring exchange `p2p`, the chain broadcast) over buffer
   sizes from 4 KiB by factors of 4 up to twice the largest buffer a strategy passes at max-len (at most 32 MiB);
   the median of max(5, `--repeats`) timed calls after one untimed, the slowest rank's.
   -> DIR/collectives.csv. Across nodes (torchrun --nnodes N) these run inside each node, and
   all_gather, reduce_scatter, all_reduce and p2p also over the rails (one rank per node, every rail at once)
   -> DIR/inter_node.csv, fitted to the network's latency and bandwidth (`nodes`, `gpus_per_node`,
   `inter_node_*` in the cluster file).
2. kernels (20%): GEMMs at the model's shapes (the forward, input- and
   weight-gradient GEMMs of qkv, proj, fc1, fc2 in each strategy's layout) at three lengths of the grid;
   the runtime's attention kernel, causal at s with heads/p heads and non-causal at s/p with all heads (the
   calls the strategies make); device memory (CUDA: the device's; CPU: physical memory / p); the analytic
   model's step terms (`measure_step_terms`, `calibrate_kernels`): the seconds of one operator dispatch in training (a
   forward + backward chain of tiny operators that require grad, over the dispatches counted in it), the seconds of
   one dispatch inside the runtime's own step (the model's forward + backward under each strategy at the
   shortest length that splits, less what it moves, over the dispatches counted in it), the
   element-wise bandwidth (layer norm, GELU, add over [t, 4h] at the middle length), the bandwidth over a
   buffer larger than the caches (the optimizer step's: an in-place add over 64 MiB), the fraction of a
   ring exchange that hides behind a GEMM, what a blocking all-gather costs after a GEMM beyond the two
   timed alone, the step epilogue timed (gradient norm, AdamW, finite check: the same work every step),
   and, counted on rank 0, the runtime's dispatches and memory-bound
   bytes per sub-layer and option, embedding / head and step epilogue (gradient norm, AdamW, finite check;
   `step_counts`).
   -> DIR/gemm.csv, DIR/attention.csv
   Then DIR/cluster.toml (alpha and busbw fitted per collective,
   efficiency curves, `source = "measured: ..."` and a [provenance] table: host, device, software, date).
3. replay tables (15%; `replay_tables`): the replay cost model's kernel tables at the shapes the
   runtime's own trace issues for the model at p ranks over the profile lengths (every strategy): every traced
   GEMM and attention call, element-wise seconds by size, and the per-operation dispatch cost of a training
   step. -> DIR/kernels/ (gemm.csv, attention.csv, elementwise.csv, dispatch.csv), which
   `KernelTables.read(DIR / "kernels")` reads. Tracing counts against the stage's share (cached afterwards: a
   rerun traces nothing), and so do the GEMMs and attention calls; the element-wise and dispatch rows (a second
   or two) are always measured. What the budget left is listed under "replay_skipped" in DIR/calibrate.json,
   and the stage stays unfinished, so a rerun measures only that.
4. profile (the rest): one training step (forward + backward, no optimizer) of the whole model with each
   strategy, with and without recomputation, on every rank (`measured-distributed`),
   over `--lengths` lengths from max-len/16 to max-len (geometric, multiples of 2p); lengths ascending,
   every option at a length before the next length, so a budget cut leaves every curve's short end.
   -> DIR/profile.csv (the cost model's profile schema plus compute_s, comm_s, comm_modelled).

Resumable: every file is written atomically as soon as it is complete (the profile after every point); a
rerun with the same settings skips finished stages and profile points (`--force` starts over); other
settings in the same DIR are an error. Then: `paradyse-lab costmodel ablate --profiles DIR/profile.csv
--cluster DIR/cluster.toml --no-regret`, `paradyse-lab train|simulate --cluster DIR/cluster.toml ...`,
`paradyse-lab validate-run --out DIR`.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import platform
import socket
import sys
import time
from dataclasses import asdict
from pathlib import Path

from paradyse_lab.app.measure.calibrate_collectives import INTER_NODE_OPS, measure_collectives
from paradyse_lab.app.measure.calibrate_kernels import (
    counted_steps,
    device_memory_bytes,
    measure_kernels,
    measure_step_terms,
)
from paradyse_lab.app.measure.calibrate_options import Budget, CalibrateOptions, length_grid, profile_options
from paradyse_lab.app.measure.calibrate_profile import measure_profile, option_name
from paradyse_lab.app.measure.profiler import device_name
from paradyse_lab.app.measure.replay_tables import Measurer, measure_tables
from paradyse_lab.cluster.measured import Measurements, fit_collectives, measured_cluster_toml
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import layout_unit
from paradyse_lab.errors import UserInputError
from paradyse_lab.files.atomic_write import atomic_open, read_json_object, write_text_atomic
from paradyse_lab.results.software_versions import software_versions, versions_text
from paradyse_lab.runtime.launch.ranks import agree, agree_flag

KERNELS_DIR = "kernels"
"""DIR's folder of the replay model's kernel tables."""
SETTINGS_FILE = "calibrate.json"
"""DIR's resume state: the settings, the finished stages, the collective fits, the skipped profile points."""


def provenance(device, opts: CalibrateOptions, p: int) -> dict:
    """The cluster file's [provenance] table: host, device, software, platform, date and the command."""
    return {"host": socket.gethostname(), "device": device_name(device),
            "software": versions_text(software_versions(device=device)),
            "platform": platform.platform(), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": f"paradyse-lab calibrate --nproc {p} --model {opts.model} --max-len {opts.max_len} "
                       f"--lengths {opts.lengths} --repeats {opts.repeats}", "name": "cluster"}


def calibrate(opts: CalibrateOptions, group=None, progress: bool = True) -> dict | None:
    """Run every stage on this rank (call on every rank of `group`); rank 0 writes DIR and returns the
    summary (other ranks return None)."""
    import pandas as pd  # lazy: pandas: slow to load, only this path needs it
    import torch  # lazy: torch takes seconds to load; only this path runs it

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import collectives as comm

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm.nodes import node_layout

    p, rank = comm.size(group), comm.rank(group)
    nodes = node_layout(group)  # collectives inside one node, and over the rails across nodes
    out = Path(opts.out)
    gpu = torch.cuda.is_available() and (p == 1 or comm.is_nccl(group))  # as the training run's device
    device = torch.device("cuda", torch.cuda.current_device()) if gpu else torch.device("cpu")
    dtype = torch.bfloat16 if gpu else torch.float32
    spec = get_model(opts.model)
    lengths = length_grid(opts.max_len, opts.lengths, layout_unit(p))
    state = agree(_load_state(out, opts) if rank == 0 else None, group)
    budget = Budget(opts.budget_s)
    bar = None
    n_units = 6 + 2 + 1 + len(lengths) * len(profile_options(opts.recompute))
    if progress and rank == 0:
        from tqdm import tqdm

        bar = tqdm(total=n_units, desc="calibrate", file=sys.stderr, dynamic_ncols=True)
    if "collectives" not in state["done"]:
        if bar is not None:
            bar.set_postfix_str("collectives")
        coll = measure_collectives(opts, spec, budget, device, dtype, nodes.node_group or group, bar)
        inter = measure_collectives(opts, spec, budget, device, dtype, nodes.rail_group, None,
                                    INTER_NODE_OPS) if nodes.nodes > 1 else []
        if rank == 0:
            _write_csv(out / "collectives.csv", coll, ("op", "ranks", "buffer_bytes", "median_s", "repeats"))
            if nodes.nodes > 1:
                _write_csv(out / "inter_node.csv", inter, ("op", "ranks", "buffer_bytes", "median_s", "repeats"))
            state = _mark(out, state, "collectives")
    elif bar is not None:
        bar.update(6)
    if "kernels" not in state["done"]:
        if bar is not None:
            bar.set_postfix_str("kernels")
        gemm, att = measure_kernels(opts, spec, lengths, budget, device, dtype, group, bar)
        if not gemm or not att:  # the same on every rank (the budget checks agree); no step terms for no file
            raise UserInputError(f"the time budget (--budget-s {opts.budget_s:g}) ran out before any "
                                 f"{'GEMM' if not gemm else 'attention kernel'} was measured; no cluster file "
                                 "written: rerun with a larger --budget-s")
        terms_start = time.perf_counter()  # the step terms and counts are bounded: not charged to --budget-s
        terms = measure_step_terms(spec, lengths, device, dtype, group)
        if rank == 0:
            _write_csv(out / "gemm.csv", gemm, tuple(gemm[0]) if gemm else ("m",))
            _write_csv(out / "attention.csv", att, tuple(att[0]) if att else ("seq_len",))
            coll = pd.read_csv(out / "collectives.csv") if (out / "collectives.csv").stat().st_size else None
            m = Measurements(ranks=p, gpu_name=_gpu_name(device), memory_bytes=device_memory_bytes(device, p),
                             **terms, counted_model=spec.name,  # the step terms: Measurements' fields by name
                             step_counts=counted_steps(spec, p, layout_unit(p), lengths, opts.recompute, dtype),
                             gemm=[(min(r["m"], r["n"], r["k"]), r["flops"], r["median_s"]) for r in gemm],
                             attention=[(r["seq_len"], r["causal"] == "true", r["flops"], r["fwd_s"] + r["bwd_s"])
                                        for r in att],
                             collectives=_collective_points(coll), provenance=provenance(device, opts, p),
                             nodes=nodes.nodes, inter_node=_collective_points(_read_rows(out / "inter_node.csv")))
            write_text_atomic(out / "cluster.toml", measured_cluster_toml(m))
            state["fits"] = {op: asdict(f) for op, f in fit_collectives(m).items()}
            state = _mark(out, state, "kernels")
        budget.start += time.perf_counter() - terms_start
    elif bar is not None:
        bar.update(2)
    state = agree(state, group)
    if "replay" not in state["done"]:
        if bar is not None:
            bar.set_postfix_str("replay tables")
        state = _replay_stage(opts, out, spec, lengths, budget, device, dtype, group, state)
    if bar is not None:
        bar.update(1)
        bar.set_postfix_str("profile")
    skipped = _profile_stage(opts, out, lengths, budget, group, bar)
    if bar is not None:
        bar.close()
    if rank != 0:
        return None
    state["skipped"] = skipped
    state["lengths"] = lengths
    state["wall_s"] = state.get("wall_s", 0.0) + time.perf_counter() - budget.start
    state = _mark(out, state, "profile")
    return state


def _replay_stage(opts: CalibrateOptions, out: Path, spec, lengths, budget: Budget, device, dtype, group,
                  state: dict) -> dict:
    """Stage 3 on every rank (module docstring): rank 0 traces and writes DIR/kernels/; every rank times each
    point at once (rank 0's values), the budget decisions rank 0's."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import collectives as comm

    # lazy: safetensors: only checkpoint paths need it
    from paradyse_lab.runtime.model.parallel_gpt import STRATEGY_MODULES

    p, rank = comm.size(group), comm.rank(group)

    def fits(predicted_s: float) -> bool:
        return agree_flag(budget.fits("replay", predicted_s), group)

    def barrier():
        if p > 1:
            torch.distributed.barrier(group=group)

    measurer = Measurer(device, dtype, fits, barrier, max(opts.repeats, 1))
    got = measure_tables(spec, p, lengths, list(STRATEGY_MODULES), measurer, out / KERNELS_DIR,
                         trace_fits=lambda s: budget.fits("replay", s), lead=rank == 0,
                         share=lambda v: agree(v, group))
    if rank != 0:
        return state
    state = dict(state, replay_skipped=got["skipped"], replay_rows=got["rows"])
    if got["skipped"]:
        print(f"calibrate: the replay stage ran out of its time share with {len(got['skipped'])} point(s) left "
              f"(listed under replay_skipped in {out / SETTINGS_FILE}); a rerun measures them", file=sys.stderr)
        write_text_atomic(out / SETTINGS_FILE, json.dumps(state, indent=1, default=str) + "\n")
        return state
    return _mark(out, state, "replay")


def _profile_stage(opts: CalibrateOptions, out: Path, lengths, budget: Budget, group, bar) -> list[str]:
    """Stage 4 on every rank: the profile points DIR/profile.csv does not hold yet (`measure_profile`), rank 0
    rewriting the file after each; the points skipped, as 'option@length: reason'."""
    import pandas as pd  # lazy: pandas: slow to load, only this path needs it

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import collectives as comm

    rank = comm.rank(group)
    done = {}
    if rank == 0 and (out / "profile.csv").is_file():
        done = {(option_name(r), int(r["seq_len"])): r for r in pd.read_csv(out / "profile.csv", dtype=str,
                                                                       keep_default_na=False).to_dict("records")}
    done = agree(done, group)

    def write(df):
        if rank == 0:
            from paradyse_lab.app.measure.profiler import write_rows_atomic

            df = df.copy()
            for c in ("time_s", "compute_s", "comm_s"):
                df[c] = df[c].astype(float)
            write_rows_atomic(df, str(out / "profile.csv"))

    return measure_profile(opts, lengths, budget, group, bar, done, write)


def _gpu_name(device) -> str:
    return device_name(device)


def _read_rows(path: Path):
    """A measured CSV as a DataFrame (None when empty or absent)."""
    import pandas as pd  # lazy: pandas: slow to load, only this path needs it

    return pd.read_csv(path) if path.is_file() and path.stat().st_size else None


def _collective_points(df) -> dict:
    if df is None or df.empty:
        return {}
    return {op: list(zip(g["buffer_bytes"].astype(float), g["median_s"].astype(float)))
            for op, g in df.groupby("op")}


def _write_csv(path: Path, rows: list[dict], columns) -> None:
    with atomic_open(path) as f:
        writer = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def _load_state(out: Path, opts: CalibrateOptions) -> dict:
    path = out / SETTINGS_FILE
    if path.is_file():
        state = read_json_object(path)
        if state.get("settings") == opts.settings():
            return state
    return {"settings": opts.settings(), "done": []}


def _mark(out: Path, state: dict, stage: str) -> dict:
    state = dict(state, done=sorted(set(state["done"]) | {stage}))
    write_text_atomic(out / SETTINGS_FILE, json.dumps(state, indent=1, default=str) + "\n")
    return state


if __name__ == "__main__":  # the command line lives in paradyse_lab/cli/; refuse instead of doing nothing
    import sys

    print("error: run `paradyse-lab calibrate ...` (or `torchrun --nproc-per-node N -m paradyse_lab calibrate ...`); "
          "this module is a library", file=sys.stderr)
    raise SystemExit(2)
