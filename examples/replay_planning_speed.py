"""How long the dp policy takes to plan and simulate Figure 2's six panels when the replay model prices every
step, beside the analytic model, in this process's CPU time (usable on a loaded machine).

    python examples/replay_planning_speed.py [--cluster h100-80gb-x8] [--size 200] [--csv OUT.csv]

Each panel (github_code and grch38 x bert, llama and gpt) is one `simulate --policy dynamic:dp` run over the
dataset's sampled lengths, planned and charged by one cost model on a cluster with kernel tables. The replay
model's first run of a shape class traces it (the runtime's code on meta tensors, then cached on disk,
$PARADYSE_TRACE_CACHE): run the script twice to see the cached (warm) cost.
"""

from __future__ import annotations

import argparse
import csv
import time

import paradyse_lab.app  # noqa: F401  (installs the runtime's tracer the replay model prices from)
from paradyse_lab.cli.simulate_options import SimulationOptions
from paradyse_lab.simulator.experiments import run_one
from paradyse_lab.simulator.run_metrics import summarize

PANELS = [(d, m) for d in ("github_code", "grch38") for m in ("bert", "llama", "gpt")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="h100-80gb-x8")
    ap.add_argument("--size", type=int, default=200, help="sequences per panel (Figure 2's: 200)")
    ap.add_argument("--csv", default="", help="also write the table here")
    args = ap.parse_args()
    rows = []
    for model in ("replay", "analytic"):
        setup = SimulationOptions(truth_cost_model=model, cluster=args.cluster, size=args.size).setup()  # simulate's
        for dataset, name in PANELS:
            t0 = time.process_time()
            run = run_one(setup, name, dataset, "dynamic:dp", progress=False)
            cpu_s = time.process_time() - t0
            s = summarize(run, name, dataset, "dynamic:dp")
            rows.append({"cost_model": model, "dataset": dataset, "model": name, "steps": s.steps,
                         "cpu_s": round(cpu_s, 2), "simulated_time_s": round(s.total_time_s, 2)})
            print(f"{model:8s} {dataset:11s} {name:5s} steps {s.steps:4d}  cpu {cpu_s:7.2f} s  "
                  f"simulated {s.total_time_s:8.2f} s", flush=True)
    for model in ("replay", "analytic"):
        total = sum(r["cpu_s"] for r in rows if r["cost_model"] == model)
        print(f"{model}: {total:.1f} CPU s over the six panels")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
