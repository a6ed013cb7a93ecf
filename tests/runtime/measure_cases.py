"""The measuring commands inside the world: `profile --mode distributed` against its rank-local mode, and
`calibrate` then `validate-run` (measure, fit, plan, train, compare) at a tiny size.
"""

from __future__ import annotations

import dataclasses

from reference_checks import (
    S,
)
from train_cases import _shared_tmpdir

from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.runtime.model.parallel_gpt import STRATEGY_MODULES

CASES = {}
ONLY_AT: dict[str, tuple[int, ...]] = {}


def profile_distributed_case(rank: int, p: int, group) -> None:
    """`profile --mode distributed` in this process group (what torchrun runs, minus setting the group up):
    rank 0 writes a valid profile, one measured-distributed row per (option, length), positive times, and its
    kept and (CPU: lower-bound) peak bytes equal the rank-local mode's for the same p."""
    import argparse
    import os

    import torch.distributed as dist

    from paradyse_lab.app.measure.profiler import profile, profile_distributed
    from paradyse_lab.cli.profile_command import add_arguments, parse_options
    from paradyse_lab.costmodel.profiles import read_profiles

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    root = _shared_tmpdir(rank, p, group)
    out = os.path.join(root, "prof.csv")
    common = ["--model", "gpt2-tiny", "--seqs", f"{S},{2 * S}", "--strategies", "megatron_ts,ulysses_z+recompute",
              "--layers", "1", "--warmup", "0", "--repeats", "1", "--out", out]
    args = parser.parse_args(common + ["--mode", "distributed"])
    rows = profile_distributed(parse_options(args), args.out, group, progress=False)
    assert len(rows) == 4 and (rows["p"] == p).all()
    if p > 1:
        dist.barrier(group=group)  # rank 0 has written the file
    if rank == 0:
        df = read_profiles(out)
        assert set(df["source"]) == {"measured-distributed"} and (df["p"] == p).all() and (df["layers"] == 1).all()
        key = ["strategy", "recompute", "seq_len"]
        assert sorted(map(tuple, df[key].to_numpy().tolist())) == [
            ("megatron_ts", False, S), ("megatron_ts", False, 2 * S),
            ("ulysses_z", True, S), ("ulysses_z", True, 2 * S)]
        assert (df["time_s"] > 0).all() and (df["kept_bytes"] > 0).all()
        assert df["software"].str.contains("torch=").all()
        assert os.listdir(root) == ["prof.csv"]  # written atomically: no temporary file left
        local = profile(parse_options(parser.parse_args(common + ["--mode", "rank-local", "--p", str(p)])),
                        progress=False)
        assert set(local["source"]) == {"measured-rank-local"}
        local["recompute"] = local["recompute"] == "true"
        both = df.merge(local, on=key, suffixes=("", "_local")).sort_values(key)
        assert len(both) == 4
        assert (both["kept_bytes"] == both["kept_bytes_local"]).all(), both[key + ["kept_bytes", "kept_bytes_local"]]
        assert (both["peak_bytes"] == both["peak_bytes_local"]).all(), both[key + ["peak_bytes", "peak_bytes_local"]]
        kept = dict(zip(zip(both["strategy"], both["seq_len"]), both["kept_bytes"]))
        assert kept[("ulysses_z", S)] < kept[("megatron_ts", S)]  # recomputation keeps only the layer inputs
        assert kept[("megatron_ts", S)] < kept[("megatron_ts", 2 * S)]
    if p > 1:
        dist.barrier(group=group)
    if rank == 0:
        import shutil

        shutil.rmtree(root)


CASES["profile-distributed"] = profile_distributed_case
ONLY_AT["profile-distributed"] = (2, 3)  # the profiler takes no other path at p = 1 or 4: an even and an odd p

def calibrate_validate_case(rank: int, p: int, group) -> None:
    """`paradyse-lab calibrate` then `paradyse-lab validate-run` at a tiny size, inside this process group
    (what their launcher runs on every rank): the files and their structure, not the speed. p = 2 only
    (the benchmark's world size; the loop costs seconds)."""
    import json
    import os
    import time
    from unittest import mock

    import torch.distributed as dist

    from paradyse_lab.app.measure import kernel_bench
    from paradyse_lab.app.measure.calibrate import calibrate
    from paradyse_lab.app.measure.calibrate_options import CalibrateOptions, profile_options
    from paradyse_lab.app.validate_run import POLICIES, ValidateOptions, execute_policies
    from paradyse_lab.cli.validate_run_command import finish
    from paradyse_lab.cluster.files import load_cluster_toml
    from paradyse_lab.cluster.spec import COLLECTIVES
    from paradyse_lab.costmodel.profiles import read_profiles

    root = _shared_tmpdir(rank, p, group)
    model = os.path.join(root, "tiny.json")  # one layer, h = 32: the loop's structure at the least cost
    if rank == 0:
        with open(model, "w") as f:
            json.dump({"model_type": "gpt2", "n_embd": 32, "n_head": 4, "n_layer": 1, "vocab_size": 64,
                       "n_positions": 16, "torch_dtype": "float32"}, f)
    dist.barrier(group=group)
    opts = CalibrateOptions(out=root, nproc=p, model=model, max_len=16, budget_s=3600.0, lengths=2,
                            repeats=1, warmup=0, recompute=False)  # a budget no stage reaches at this size, on a
    # loaded machine too; the 4 strategies without their +recompute options (the same loops over 4 more names, half
    # the profile and count stages' steps: the profiler's +recompute rows are profile-distributed's, a +recompute
    # option's counted launches and bytes test_step_counts.py's)
    with (mock.patch.object(kernel_bench, "TARGET_SCALE", 0.0),  # each timing one timed call after its warm-up:
          mock.patch.object(kernel_bench, "REPEATS_CAP", 1)):  # what is written is the subject, not how precisely
        state = calibrate(opts, group, progress=False)  # it is timed
    if rank == 0:
        cl = load_cluster_toml(os.path.join(root, "cluster.toml"))
        assert cl.gpus == 2 and cl.source.startswith("measured")
        assert set(cl.alpha_by_op_s) == set(COLLECTIVES) and all(v > 0 for v in cl.busbw_bytes_per_s.values())
        assert all(0 < e <= 1 for _, e in cl.gemm_efficiency + cl.attention_efficiency_causal)
        # the analytic model's step terms: launch cost, overlap, and the runtime's counts for this model at p
        assert cl.launch_s > 0 and cl.runtime_launch_s > 0 and 0 <= cl.comm_overlap <= 1 and cl.counted_model == "tiny"
        assert cl.epilogue_s > 0 and "collective_sync_us = " in open(os.path.join(root, "cluster.toml")).read()
        assert set(cl.step_counts) == {f"{o}.{k}" for o in profile_options(False) for k in ("attention", "mlp")} | {
            "fixed", "optimizer"}
        assert all(c[0] > 0 for c in cl.step_counts.values())
        df = read_profiles(os.path.join(root, "profile.csv"))
        assert set(df["source"]) == {"measured-distributed"} and (df["p"] == 2).all()
        got = {(s + ("+recompute" if r else ""), n) for s, r, n in zip(df["strategy"], df["recompute"], df["seq_len"])}
        assert state["lengths"] == [4, 16]
        assert got == {(o, n) for o in profile_options(False) for n in (4, 16)}, got
        assert state["done"] == ["collectives", "kernels", "profile", "replay"] and not state["skipped"]
        _assert_replay_tables_price_the_traced_layer(os.path.join(root, "kernels"), model, cl)
    t0 = time.perf_counter()
    calibrate(opts, group, progress=False)  # resumed: every stage and point is already there
    assert time.perf_counter() - t0 < 2.0
    if rank == 0:
        assert len(read_profiles(os.path.join(root, "profile.csv"))) == 8
    vopts = ValidateOptions(out=root, nproc=p, model=model, dataset="uniform:4:16", steps=1, max_len=16,
                            cluster=os.path.join(root, "cluster.toml"), cost_model="analytic", profiles="")
    execute_policies(vopts, group=group)
    if rank == 0:
        result = json.loads(json.dumps(finish(vopts, 0, formats=("png",))))  # what --format json prints (the
        # figure as PNG only: the PDF of the same figure costs 0.3 CPU s, the figures' own tests write both); one
        # step a policy, none left out: skipping the first steps is test_measured_cluster.py's test_pair_* (in-process)
        assert set(result["policies"]) == set(POLICIES)
        for m in result["policies"].values():
            assert m["measured_total_s"] > 0 and m["predicted_total_s"] > 0 and m["step_mape"] >= 0
            assert m["steps"] == 1 and m["repeats"] == 1 and m["plans_match"] and m["spread"] == 0
            assert m["measured_min_total_s"] == m["measured_max_total_s"] == m["measured_total_s"]  # one run
        assert sorted(result["ranking"]["measured"]) == sorted(POLICIES)
        assert set(result["speedup_over_best_static"]) == {"dynamic:heuristic", "dynamic:dp"}
        assert result["cost_model"] == "analytic" and result["cluster"].endswith("cluster.toml")
        assert os.path.getsize(os.path.join(root, "figures", "validate_run.png")) > 0
        assert set(read_profiles(os.path.join(root, "profile.csv"))["model"]) == {model}
    if p > 1:
        dist.barrier(group=group)
    if rank == 0:
        import shutil

        shutil.rmtree(root)


def _assert_replay_tables_price_the_traced_layer(folder: str, model: str, cluster) -> None:
    """calibrate's DIR/kernels/: the replay model reads them, they hold every GEMM the runtime's trace issues for
    the model at p = 2 under every strategy, and they price its traced layer serially with the measured
    dispatch cost (the CPU's host runs the kernels)."""

    from paradyse_lab.app.measure.replay_tables import read_rows
    from paradyse_lab.app.replay_traces import SublayerTraces
    from paradyse_lab.core.model_spec import get_model
    from paradyse_lab.costmodel.replay.price import critical_path, measured_prices
    from paradyse_lab.costmodel.replay.tables import KernelTables

    tables = KernelTables.read(folder)
    prices = measured_prices(tables, cluster)
    assert prices.serial and prices.dispatch_s > 0 and tables.elementwise is not None
    measured = {(int(r["m"]), int(r["n"]), int(r["k"])) for r in read_rows(f"{folder}/gemm.csv")}
    traces = SublayerTraces(dataclasses.replace(get_model(model), dtype="fp32"), 2, "cpu")
    for name in STRATEGY_MODULES:
        ops = traces.trace("attention", StrategyOption(name), 16) + traces.trace("mlp", StrategyOption(name), 16)
        assert {(o.m, o.n, o.k) for o in ops if o.kind == "gemm"} <= measured, name
        step = critical_path(ops, prices)
        assert step.time_s > max(step.host_s, step.kernel_s) > 0


CASES["calibrate-validate-loop"] = calibrate_validate_case
ONLY_AT["calibrate-validate-loop"] = (2,)
