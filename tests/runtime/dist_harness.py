"""Run many test cases inside ONE gloo process group per world size (CPU), and collect their outcomes.

Used by tests/runtime/test_distributed.py (run: `python -m pytest -q tests/runtime`). A case is a
function `case(rank, p, group)` in the module's `CASES` dict that raises on failure; every rank runs every
case in the same order.
`run_world(p, module, names)` spawns p processes once, runs only the named cases of `module` in each, and
returns a `World`: per case None if it passed on every rank, else the first rank's error text, the case's
own time (the slowest rank's, seconds) and its CPU seconds (all ranks together), beside the process-group
start-up and the whole world's wall time and CPU seconds.

The ranks are forked from one forkserver per pytest process (Python's `multiprocessing.forkserver`), which has
imported torch, torch._dynamo (what the first `torch.optim` optimizer imports) and the cases' module once: a
world's start-up then costs no imports, and the worlds after the first on a pytest worker share them. Each rank
takes the caller's environment and working directory (a spawned rank's), not the forkserver's, starts with the
objects it inherited frozen out of its garbage collections (gc_paused, rank_warmup) and runs on one CPU, gloo's
threads with it (`_pin_to_one_cpu`).
"""

from __future__ import annotations

import datetime
import gc
import importlib
import json
import os
import socket
import tempfile
import time
import traceback
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from paradyse_lab.runtime.launch.ranks import rendezvous_store

CASE_TIMEOUT_S = 120
START = "(process-group start-up)"
"""Key of `World.seconds` for the slowest rank's time from spawn to joined group, cases imported."""


@dataclass
class World:
    """What one world size's run gave."""

    errors: dict[str, str | None]
    """Per case: None if it passed on every rank, else the first failing rank's error text."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Per case (and START): the slowest rank's time, seconds."""
    wall_s: float = 0.0
    """Spawn to join, seconds."""
    cpu_s: float = 0.0
    """CPU seconds (user + system) of all the ranks together, from the fork to the end of their last case."""
    cpu: dict[str, float] = field(default_factory=dict)
    """Per case (and START): the CPU seconds of all the ranks together (the load-robust cost of a case)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PRELOAD = ("gc_paused", "torch", "torch.distributed", "torch._dynamo", "dist_harness", "paradyse_lab.app.training",
           "paradyse_lab.runtime.training.loop", "paradyse_lab.simulator.planner", "paradyse_lab.solvers.bounds",
           "numba.np.arraymath", "networkx",
           "transformers.models.llama.modeling_llama", "transformers.models.gpt2.modeling_gpt2",
           "paradyse_lab.runtime.checkpoints.dcp", "rank_warmup")
"""Modules the forkserver imports before it forks a rank (with the cases' module): each costs seconds per process
(torch._dynamo: the first optimizer; paradyse_lab.simulator.planner: pandas, a `train`'s planner; numba.np.arraymath:
numba; paradyse_lab.runtime.checkpoints.dcp: torch.distributed.checkpoint, ~0.1 CPU s in every rank of the worlds
that checkpoint, 7 ranks;
transformers: rank 0 of a world with Hugging Face cases, once per pytest process instead of once per world;
rank_warmup: the DP solver's compiled kernels, loaded once instead of once per rank; gc_paused: no garbage collection
during these imports, rank_warmup collects once and freezes the objects the ranks inherit)."""


def join_world(rank: int, p: int, port: int) -> None:
    """Join the gloo world of p ranks whose store (the launcher's `rendezvous_store`, held by the process that
    starts the world, so that two worlds started at once never meet at one port) listens on `port`."""
    store = dist.TCPStore("127.0.0.1", port, None, False, timeout=datetime.timedelta(seconds=CASE_TIMEOUT_S))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=p,
                            timeout=datetime.timedelta(seconds=CASE_TIMEOUT_S))


def _worker(rank: int, p: int, port: int, module: str, names: list[str], out_dir: str, spawned_at: float,
            environ: dict[str, str], cwd: str) -> None:
    gc.freeze()  # what the cases' module left in the forkserver: inherited, never walked by a rank's collections
    gc.enable()  # off in the forkserver since gc_paused
    os.environ.clear()
    os.environ.update(environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.chdir(cwd)
    torch.set_num_threads(1)
    _pin_to_one_cpu(rank)  # before the process group starts gloo's threads, which take this thread's CPU set
    join_world(rank, p, port)
    mod = importlib.import_module(module)
    results: dict[str, str | None] = {}
    seconds: dict[str, float] = {START: time.time() - spawned_at}
    cpu: dict[str, float] = {START: time.process_time()}
    try:
        for name in names:
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                mod.CASES[name](rank, p, None)
                results[name] = None
            except Exception:  # noqa: BLE001 - reported to pytest
                results[name] = f"rank {rank}: {traceback.format_exc()}"
            seconds[name], cpu[name] = time.perf_counter() - t0, time.process_time() - c0
            with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
                json.dump({"results": results, "seconds": seconds, "cpu": cpu, "cpu_s": time.process_time()}, f)
    finally:
        dist.destroy_process_group()


def _pin_to_one_cpu(rank: int) -> None:
    """Keep this rank and every thread it starts (gloo's event loop and workers) on one CPU, rank r on the
    (r mod n)-th of `rank_cpus`: a gloo collective hands each message from gloo's event-loop thread to the waiting
    thread, and a hand-off between two CPUs costs more than one on the same CPU (on 2 cores, p = 4: ~1.4 instead
    of ~2.0 ms CPU a collective and rank in a loop of small all-reduces and all-gathers)."""
    if not hasattr(os, "sched_setaffinity"):  # macOS, Windows: no CPU affinity to set
        return
    cpus = rank_cpus(sorted(os.sched_getaffinity(0)), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    os.sched_setaffinity(0, {cpus[rank % len(cpus)]})


def rank_cpus(cpus: list[int], workers: int) -> list[int]:
    """The CPUs a world's ranks share: those beyond one each for the other pytest-xdist workers, at least the last
    one. On 2 cores under `-n 2` every rank shares the second CPU: the other worker keeps the first busy, and ranks
    spread over both CPUs left one idle whenever they waited on each other while the other worker held the other
    CPU (the whole suite on a 2-core VM: ~10-30 s less wall, about half the idle core-seconds)."""
    return cpus[workers - 1:] or cpus[-1:]


def run_world(p: int, module: str, names: list[str], timeout_s: float = 600) -> World:
    """Run the cases `names` of `module` (and no other) on p gloo ranks; each case's outcome and time."""
    started = time.perf_counter()
    mp.set_forkserver_preload([*PRELOAD, module])  # read when this process's forkserver starts (its first world)
    _start_forkserver()
    store = rendezvous_store(CASE_TIMEOUT_S)  # held until the ranks are done: no other world can take its port
    with tempfile.TemporaryDirectory() as out_dir:
        args = (p, store.port, module, names, out_dir, time.time(), dict(os.environ), os.getcwd())
        ctx = mp.start_processes(_worker, args=args, nprocs=p, join=False, start_method="forkserver")
        crash = None
        deadline = time.monotonic() + timeout_s
        try:
            while not ctx.join(timeout=2):
                if time.monotonic() > deadline:
                    for proc in ctx.processes:
                        proc.kill()
                    crash = f"timed out after {timeout_s} s"
                    break
        except Exception as err:  # noqa: BLE001 - a rank died: the cases it did not finish fail
            crash = f"a rank process failed: {err}"
        reports = [_read(out_dir, r) for r in range(p)]
    world = World({n: crash or "not run (a rank failed or timed out)" for n in names},
                  wall_s=time.perf_counter() - started)
    for name in names:
        if all(rep is not None and name in rep["results"] for rep in reports):  # ran on every rank
            world.errors[name] = next((rep["results"][name] for rep in reports if rep["results"][name]), None)
    world.cpu_s = sum(rep.get("cpu_s", 0.0) for rep in reports if rep is not None)
    for rep in reports:
        for name, secs in (rep or {"seconds": {}})["seconds"].items():
            world.seconds[name] = max(world.seconds.get(name, 0.0), secs)
        for name, secs in (rep or {}).get("cpu", {}).items():
            world.cpu[name] = world.cpu.get(name, 0.0) + secs
    return world


HERE = os.path.dirname(os.path.abspath(__file__))
"""This folder: the harness, the cases' modules and rank_warmup."""


def _start_forkserver() -> None:
    """Start this process's forkserver (once: later calls return at once) with `HERE` on its PYTHONPATH. CPython
    3.11's forkserver imports its preload list on the interpreter's own sys.path, not the caller's
    (`multiprocessing.forkserver.main` leaves its `sys_path` argument unused), and skips a module it cannot import
    without a word: without `HERE` this harness, rank_warmup and the cases' module were imported again by every
    rank. The ranks take the caller's environment back (`_worker`), so none of them sees the change."""
    from multiprocessing import forkserver
    from unittest import mock

    before = os.environ.get("PYTHONPATH")
    with mock.patch.dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, before] if before else [HERE])):
        forkserver.ensure_running()


def _read(out_dir: str, r: int) -> dict | None:
    """Rank r's report ({"results", "seconds"}), None when it wrote none."""
    path = os.path.join(out_dir, f"rank{r}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)
