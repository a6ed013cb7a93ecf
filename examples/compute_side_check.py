"""The analytic model's compute side on a measured CPU, checked in CPU time (usable on a loaded machine).

    python examples/compute_side_check.py [--model gpt2-cpu] [--lengths 64,256,1024] [--csv OUT.csv]

On a shared machine a wall-clock step measures the load; the CPU time of one process is close to what a quiet
machine gives. This script measures, in this one process's CPU time, what `paradyse-lab calibrate` measures
for the analytic model's compute side (GEMMs and attention kernels at the model's shapes, the dispatch cost,
the element-wise and state bandwidths, the runtime's counted dispatches and bytes; paradyse_lab/app/measure/
calibrate_kernels.py), then times whole training steps (forward + backward + the step epilogue) of one process playing
rank 0 of p = 2 (runtime/comm/fake_group.py: no communication) per strategy and length, and prints them beside the
analytic model's prediction of the same step without its collectives (uniform plan + head + epilogue). It
checks the counted terms, not the collectives (`validate-run` on a quiet machine checks everything).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

STRATEGIES = ("megatron_ts", "megatron_cz", "ulysses_z", "metp")


def cpu_time_cluster(spec, lengths, p: int):
    """A measured `ClusterSpec` of this process in CPU time (calibrate's kernel and step-term measurements with
    CPU time as their clock; collectives free: the fake group sends nothing)."""
    import torch
    import torch.distributed as dist

    from paradyse_lab.app.measure import calibrate_kernels as K
    from paradyse_lab.app.measure.calibrate_options import Budget, CalibrateOptions
    from paradyse_lab.cluster.files import load_cluster_toml
    from paradyse_lab.cluster.measured import Measurements, measured_cluster_toml
    from paradyse_lab.cluster.spec import COLLECTIVES
    from paradyse_lab.runtime.comm.fake_group import FakeGroup

    time.perf_counter = time.process_time  # every timer below reads this process's CPU time
    dist.barrier = lambda *a, **k: None  # one process: nothing to wait for
    K.slowest_over_ranks, K.measure_overlap = (lambda v, d, g: v), (lambda *a: 1.0)  # as calibrate_kernels calls them
    group, device, dtype = FakeGroup(p, 0), torch.device("cpu"), torch.float32
    opts = CalibrateOptions(out="", nproc=p, model=spec.name, max_len=max(lengths), budget_s=1e9)
    gemm, att = K.measure_kernels(opts, spec, lengths, Budget(1e9), device, dtype, group, None)
    terms = K.measure_step_terms(spec, lengths, device, dtype, group)
    m = Measurements(ranks=p, gpu_name="cpu (CPU time)", memory_bytes=1 << 40, hbm_bytes_per_s=terms["hbm_bytes_per_s"],
                     launch_s=terms["launch_s"], state_bytes_per_s=terms["state_bytes_per_s"], comm_overlap=1.0,
                     runtime_launch_s=terms["runtime_launch_s"], epilogue_s=terms["epilogue_s"],
                     counted_model=spec.name, step_counts=K.counted_steps(spec, p, 2 * p, lengths, False, dtype),
                     gemm=[(min(r["m"], r["n"], r["k"]), r["flops"], r["median_s"]) for r in gemm],
                     attention=[(r["seq_len"], r["causal"] == "true", r["flops"], r["fwd_s"] + r["bwd_s"])
                                for r in att],
                     collectives={op: [(4096.0, 1e-12), (8192.0, 2e-12)] for op in COLLECTIVES})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster.toml"
        path.write_text(measured_cluster_toml(m))
        return load_cluster_toml(path)


def step_rows(spec, cluster, lengths, p: int, repeats: int = 3) -> list[dict]:
    """Per strategy and length: the median CPU seconds of a training step and the analytic prediction."""
    import torch

    from paradyse_lab.app.measure.step_counts import step_epilogue
    from paradyse_lab.core.strategies import StrategyOption
    from paradyse_lab.costmodel.analytic import AnalyticCostModel
    from paradyse_lab.costmodel.uniform_plan import uniform_plan_cost
    from paradyse_lab.runtime.comm.fake_group import FakeGroup
    from paradyse_lab.runtime.model.parallel_gpt import ParallelGPT

    cfg, group = spec, FakeGroup(p, 0)
    model = ParallelGPT(cfg, group, seed=0)
    optimizer = torch.optim.AdamW(list(model.parameters()), lr=1e-4, weight_decay=0.01)
    cost_model = AnalyticCostModel(spec, cluster, p)
    rows = []
    for strategy in STRATEGIES:
        for s in lengths:
            ids = torch.randint(0, cfg.vocab_size, (1, s // p))  # [b, t] this rank's tokens
            labels = torch.randint(0, cfg.vocab_size, (1, s // p))

            def step(ids=ids, labels=labels, plan=[strategy] * cfg.layers):
                model(ids, plan, labels)[1].backward()
                step_epilogue(model, optimizer, group)
            step()  # warm-up (and AdamW's states)
            times = []
            for _ in range(repeats):
                t0 = time.process_time()
                step()
                times.append(time.process_time() - t0)
            predicted = (uniform_plan_cost(cost_model, StrategyOption(strategy), s).total_time_s
                         + cost_model.fixed(s).optimizer_s)
            measured = statistics.median(times)
            rows.append({"strategy": strategy, "seq_len": s, "measured_cpu_s": measured, "predicted_s": predicted,
                         "predicted_over_measured": predicted / measured})
    return rows


def main() -> None:
    import pandas as pd
    import torch

    from paradyse_lab.core.model_spec import get_model

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gpt2-cpu")
    parser.add_argument("--lengths", default="64,256,1024")
    parser.add_argument("--csv", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as each of calibrate's and train's two CPU ranks
    spec, p = get_model(args.model), 2
    lengths = [int(x) for x in args.lengths.split(",")]
    df = pd.DataFrame(step_rows(spec, cpu_time_cluster(spec, lengths, p), lengths, p))
    print(df.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    r = df["predicted_over_measured"]
    print(f"predicted / measured CPU time: {r.min():.2f} - {r.max():.2f} (median {r.median():.2f})")
    if args.csv:
        df.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
