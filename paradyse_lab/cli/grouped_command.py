"""`paradyse-lab simulate --global-batch N [--groups POLICY]`: a run of global batches split over groups of GPUs.

Prints the run's tokens per second, longest sequence trained and planning time, then the group sizes of every
step; `--out` writes one row per step (`STEP_COLUMNS`).
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from pathlib import Path

from paradyse_lab.cli.output import print_json, print_table
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.errors import UserInputError, require_positive_int
from paradyse_lab.simulator.group_exact import MAX_EXACT_ITEMS
from paradyse_lab.simulator.group_rounds import MAX_EXACT_ROUND_ITEMS
from paradyse_lab.simulator.grouped_runs import global_batches, simulate_grouped, summarize_grouped, workload_items
from paradyse_lab.simulator.grouped_steps import RING_POLICY, GroupPricer
from paradyse_lab.simulator.policy_spec import PolicySpec
from paradyse_lab.simulator.round_steps import held_out_per_rank
from paradyse_lab.workload.lengths import get_workload


def _refuse_other_options(opts) -> None:
    """The simulate options a grouped run does not take (one-line errors naming them)."""
    if opts.run.truth_cost_model not in ("", "analytic") or opts.plan_cost_model:
        raise UserInputError("--global-batch plans and charges with the analytic cost model; drop "
                             "--truth-cost-model / --plan-cost-model")
    if opts.exclude or opts.run.switch_memory:
        raise UserInputError("--exclude and --switch-memory do not apply to --global-batch runs")


def run_grouped(opts, groups: str) -> int:
    """Simulate `opts` (a `SimulateOptions` with a global batch) under the group policy `groups`; with
    --pack-tokens a global batch's items are packs of documents (a pack is one group's, as a sequence is)."""
    from paradyse_lab.simulator.results import write_csv_atomic  # lazy: pandas: slow to load, only this path needs it

    _refuse_other_options(opts)
    setup = opts.run.setup(opts.packing)
    cluster, model = setup.cluster_spec(), get_model(opts.model)
    if cluster.gpus & (cluster.gpus - 1):
        raise UserInputError(f"--global-batch: groups are power-of-two blocks of GPUs, so the cluster's GPU count "
                             f"must be a power of two; {cluster.name} has {cluster.gpus}")
    batch = opts.grouping.global_batch
    if groups == "sized-exact" and (batch is None or batch > MAX_EXACT_ITEMS):
        raise UserInputError(f"--groups sized-exact takes --global-batch of at most {MAX_EXACT_ITEMS} items")
    if groups == "rounds-exact" and (batch is None or batch > MAX_EXACT_ROUND_ITEMS):
        raise UserInputError(f"--groups rounds-exact takes --global-batch of at most {MAX_EXACT_ROUND_ITEMS} items")
    spec = PolicySpec.parse(opts.policy, opts.run.recompute, opts.run.granularity)
    workload = get_workload(opts.dataset, setup.size, setup.seed, pack_tokens=setup.pack_tokens,
                            pack_order=setup.pack_order, sampling=setup.sampling)
    batches = global_batches(workload_items(workload), batch, opts.grouping.global_batch_tokens, setup.seed)
    budget = cluster.memory_bytes - setup.reserve_bytes
    runnable = opts.grouping.runnable_groups
    pricer = GroupPricer(model, cluster, spec.name, budget, recompute=spec.recompute, granularity=spec.granularity,
                         runnable_only=runnable)
    uses_ring = groups in ("sized", "rounds")
    ring = GroupPricer(model, cluster, RING_POLICY, budget, runnable_only=runnable) if uses_ring else None
    per_rank = None
    if groups in ("megatron", "rounds") and workload.packs is None:  # Megatron's per-rank length, on other batches
        held = get_workload(opts.dataset, setup.size, setup.seed + 1, sampling=setup.sampling).lengths
        ring_of = pricer if groups == "megatron" else ring
        fits = [n for n in held if any(math.isfinite(ring_of.item(g, n)[0]) for g in ring_of.group_sizes())]
        per_rank = held_out_per_rank(ring_of, global_batches(fits, batch, opts.grouping.global_batch_tokens,
                                                             setup.seed + 1))
    elif groups == "megatron":
        raise UserInputError("--groups megatron schedules sequences, not packs: drop --pack-tokens")
    rows = simulate_grouped(batches, groups, pricer, ring, policy_name=f"{groups} {spec.name}", per_rank=per_rank)
    if opts.out:
        write_csv_atomic(rows, opts.out)
    summary = {"groups": groups, "policy": spec.name, "cluster": cluster.name, "gpus": cluster.gpus,
               "nodes": cluster.nodes, **({"megatron_per_rank": per_rank} if per_rank else {}),
               **summarize_grouped(rows)}
    if opts.format == "json":
        print_json({"summary": summary, "steps": rows.to_dict(orient="records")})
        return 0
    print_table(["field", "value"], [[k, f"{v:.4g}" if isinstance(v, float) else v] for k, v in summary.items()])
    print()
    print_table(["step", "items", "trained", "tokens", "rounds", "group sizes", "busy", "step ms", "sync ms",
                 "plan ms"],
                [[r.step, r.items, r.trained, r.tokens, r.rounds, r.group_sizes, r.busy_groups,
                  f"{r.step_time_s * 1e3:.1f}",
                  f"{r.sync_s * 1e3:.2f}", f"{r.plan_ms:.0f}"] for r in rows.itertuples()])
    return 0


def run_groups_experiment(opts) -> int:
    """`paradyse-lab experiment groups`: every panel, the table, the targets and the figure."""
    from paradyse_lab.app.reproduce_figures import draw_figure  # lazy: pandas: slow to load, only this path needs it

    # lazy: matplotlib: slow to load, only the figures need it
    from paradyse_lab.figures.groups import NOTE as GROUPS_NOTE

    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.simulator.groups_experiment import GroupsSetup, groups, target_checks

    run = opts.run
    if run.truth_cost_model not in ("", "analytic") or run.gpus is not None:
        raise UserInputError("experiment groups runs its own panels under the analytic model; drop "
                             "--truth-cost-model / --gpus")
    setup = GroupsSetup(size=require_positive_int("--size", run.size if run.size is not None else 128),
                        global_batch=require_positive_int("--global-batch", opts.global_batch, 2**20), seed=run.seed)
    root, started = Path(opts.out), time.perf_counter()
    table = groups(setup, root, force=opts.force, progress=sys.stderr.isatty())
    checks = target_checks(table)
    with contextlib.redirect_stdout(sys.stderr if opts.format == "json" else sys.stdout):  # stdout: JSON only
        draw_figure("groups", root, root / "figures", "groups", GROUPS_NOTE)
    if opts.format == "json":
        print_json({"groups": table.to_dict(orient="records"),
                    "targets": [{"target": n, "met": m, "measured": v} for n, m, v in checks]})
        return 0
    print_table(["cluster", "dataset", "model", "series", "policy", "tokens/s", "x ParaDySe", "x Megatron",
                 "of its bound", "dropped", "longest trainable", "untrainable", "plan ms"],
                [[r.cluster, r.dataset, r.model, r.series, r.policy, f"{r.tokens_per_s:,.0f}",
                  f"{r.vs_paradyse:.2f}", f"{r.vs_megatron:.2f}", f"{r.tokens_per_s / r.bound_tokens_per_s:.0%}",
                  r.dropped, r.longest_trainable, r.untrainable, f"{r.plan_ms_mean:.0f}"] for r in table.itertuples()])
    print()
    print_table(["target", "met", "measured"], [[n, "yes" if m else "NO", v] for n, m, v in checks])
    print(f"\n{len(table)} rows in {time.perf_counter() - started:.1f} s; wrote {root / 'groups.csv'} and "
          f"{root / 'figures' / 'groups.png'}")
    return 0
