"""Run many test cases inside ONE gloo process group per world size (CPU), and collect their outcomes.

Used by tests/runtime/test_distributed.py (run: `python -m pytest -q tests/runtime`). A case is a
function `case(rank, p, group)` in the module's `CASES` dict that raises on failure; every rank runs every
case in the same order.
`run_world(p, module, names)` spawns p processes once, runs the named cases of `module` in each, and
returns {case name: None if it passed on every rank, else the first rank's error text}.
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import socket
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

CASE_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, p: int, port: int, module: str, names: list[str], out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=p, timeout=datetime.timedelta(seconds=CASE_TIMEOUT_S))
    mod = importlib.import_module(module)
    results: dict[str, str | None] = {}
    try:
        for name in names:
            try:
                mod.CASES[name](rank, p, None)
                results[name] = None
            except Exception:  # noqa: BLE001 - reported to pytest
                results[name] = f"rank {rank}: {traceback.format_exc()}"
            with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
                json.dump(results, f)
    finally:
        dist.destroy_process_group()


def run_world(p: int, module: str, names: list[str], timeout_s: float = 600) -> dict[str, str | None]:
    """Run the cases `names` of `module` on p gloo ranks; outcome per case (None = passed everywhere)."""
    with tempfile.TemporaryDirectory() as out_dir:
        ctx = mp.start_processes(_worker, args=(p, free_port(), module, names, out_dir), nprocs=p,
                                 join=False, start_method="spawn")
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
        outcome: dict[str, str | None] = {n: crash or "not run (a rank failed or timed out)" for n in names}
        done: dict[str, str | None] = {}
        for r in range(p):
            path = os.path.join(out_dir, f"rank{r}.json")
            if not os.path.exists(path):
                continue
            with open(path) as f:
                for name, err in json.load(f).items():
                    done.setdefault(name, None)
                    if err and done[name] is None:
                        done[name] = err
        for name in names:
            ran_everywhere = all(_ran(out_dir, r, name) for r in range(p))
            if ran_everywhere:
                outcome[name] = done.get(name)
        return outcome


def _ran(out_dir: str, r: int, name: str) -> bool:
    path = os.path.join(out_dir, f"rank{r}.json")
    if not os.path.exists(path):
        return False
    with open(path) as f:
        return name in json.load(f)
