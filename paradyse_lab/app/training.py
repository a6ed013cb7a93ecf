"""Training with a planner: the runtime's training loop driven by the simulator's policies.

`train(opts, group)` is what `paradyse-lab train` runs on every rank;
`plan_policy(opts, spec, p)` builds the policy that plans each step (`static:NAME`,
`dynamic:SOLVER`, ...) with `--cost-model` on `--cluster`; `group_planner(opts, spec, p)` plans the groups of a
`--global-batch` step under `--groups` with the planner `simulate --global-batch` uses
(`choose`); `preflight(opts, p)` builds everything `train` builds from names once, so
that `--nproc N` refuses a bad name or value before it spawns a rank.
The runtime itself knows no planner: it calls the `policy_for` and `groups_for` it is given.
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from functools import partial

from paradyse_lab.app import run_summary
from paradyse_lab.app.host_cluster import host_cluster
from paradyse_lab.cluster.files import cluster_with_gpus, get_cluster
from paradyse_lab.cluster.presets import DEFAULT_CLUSTER
from paradyse_lab.core.model_folder import has_weights
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime.training.run_inputs import TokenDocuments, check_options
from paradyse_lab.simulator.group_problem import GroupChoice
from paradyse_lab.simulator.group_rounds import MAX_EXACT_ROUND_ITEMS, MAX_EXACT_ROUND_WORLD, rounds_choice
from paradyse_lab.simulator.grouped_steps import RING_POLICY, GroupPricer, check_group_policy, choose, grouped_step
from paradyse_lab.simulator.planner import build_planner
from paradyse_lab.simulator.round_steps import ROUND_POLICIES, choose_rounds, grouped_rounds
from paradyse_lab.units import gib_to_bytes
from paradyse_lab.workload.lengths import get_workload


def with_folder_weights(opts):
    """`opts` with a `--model` folder holding weights read as `--init-from` of that folder
    (the one meaning of a model folder), else `opts` as they are."""
    if opts.model and not opts.init_from and has_weights(opts.model):
        return replace(opts, model="", init_from=opts.model)
    return opts


def run_cluster(opts, p: int):
    """The cluster a run plans against: `--cluster`, else on a machine with CUDA the default preset, else this CPU
    host (the default preset's speeds, the host's memory over the `p` ranks)."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    cluster = get_cluster(opts.cluster or DEFAULT_CLUSTER)
    if opts.cluster or torch.cuda.is_available():
        return cluster
    return host_cluster(cluster, p)


def plan_policy(opts, spec, p: int, cost_model: str | None = None, *, quiet: bool = False):
    """The policy of `opts` (a `train_options.TrainOptions`) for the model `spec` at world size `p`, planning with
    `cost_model` (default `opts.cost_model`) on the run's cluster (`run_cluster`). Rank 0
    states what plans the run (and warns when the cluster's GPU is not the one present) unless `quiet`."""
    cluster = run_cluster(opts, p)
    budget = gib_to_bytes(opts.budget_gib) if opts.budget_gib else None
    planner = build_planner(opts.policy, spec, cluster, cost_model=cost_model or opts.cost_model, p=p,
                            profiles=opts.profiles or None, budget_bytes=budget, recompute=opts.recompute,
                            granularity=opts.granularity)
    if not quiet:
        _state_planner(opts, cluster, planner.cost_model.budget_bytes(planner.budget_bytes), p)
    return planner.policy


def refuse_non_analytic_groups(opts) -> None:
    """--groups plans with the analytic cost model, as `simulate --global-batch` does (its pricers are analytic)."""
    if opts.groups and opts.cost_model not in ("auto", "analytic"):
        raise UserInputError(f"--groups plans with the analytic cost model (as simulate --global-batch); drop "
                             f"--cost-model {opts.cost_model}")


def group_planner(opts, spec, p: int):
    """`plan(steps) -> (GroupedStep or StepRounds, decisions)`: the groups of one `--global-batch` step of `p` ranks
    under `opts.groups`, chosen as `simulate --global-batch --groups` chooses them (the same pricers, on `--cluster` at
    `p` GPUs with its node shape, under the run's budget), each sequence (or pack) with its plan at its group's
    size; under `rounds` / `rounds-exact` the step's rounds of splits (`choose_rounds`,
    without Megatron's schedule as a candidate: its per-rank length needs held-out batches). A step with an item
    that fits no group runs as one group of all ranks, its decisions saying they do not fit (the log's
    `feasible`), as a step without groups does. None without `--groups`."""
    if not opts.groups:
        return None
    check_group_policy(opts.groups, opts.policy)
    refuse_non_analytic_groups(opts)
    if p & (p - 1):
        raise UserInputError(f"--groups: groups are power-of-two blocks of ranks, so the world size must be a "
                             f"power of two, got {p}")
    cluster = cluster_with_gpus(get_cluster(opts.cluster or DEFAULT_CLUSTER), p)
    budget = gib_to_bytes(opts.budget_gib) if opts.budget_gib else cluster.plan_budget_bytes
    if opts.groups == "rounds-exact" and (opts.global_batch > MAX_EXACT_ROUND_ITEMS or p > MAX_EXACT_ROUND_WORLD):
        raise UserInputError(f"--groups rounds-exact takes at most {MAX_EXACT_ROUND_ITEMS} sequences per step on at "
                             f"most {MAX_EXACT_ROUND_WORLD} ranks, got --global-batch {opts.global_batch} on {p}; "
                             "use --groups rounds")
    pricer = GroupPricer(spec, cluster, opts.policy, budget, recompute=opts.recompute, granularity=opts.granularity)
    ring = GroupPricer(spec, cluster, RING_POLICY, budget) if opts.groups in ("sized", "rounds") else None
    return partial(_plan_step_groups, opts.groups, pricer, ring)


def _plan_step_groups(groups: str, pricer, ring, steps: list):
    """(the step's groups, each item's decision) of one step (`group_planner`): a `GroupedStep` under a one-split
    policy, a `StepRounds` under a rounds policy."""
    world = pricer.cluster.gpus
    whole = GroupChoice((world,), (tuple(range(len(steps))),), math.inf, 0.0)  # all ranks, as a step without groups
    if groups in ROUND_POLICIES:
        rounds = choose_rounds(groups, steps, pricer, ring)
        if not math.isfinite(rounds.step_s):  # an item fits no group
            rounds = rounds_choice([whole], pricer.step_sync)
        grouped = grouped_rounds(rounds, steps, pricer)
        size_of = grouped.size_of()
        held = pricer.rounds_held(tuple(r.sizes for r in rounds.rounds)) if len(rounds.rounds) > 1 else 0
        held_of = {i: held for items in grouped.items[1:] for i in items}  # planned beside the held buffers
    else:
        choice = choose(groups, steps, pricer, ring)
        grouped = grouped_step(choice if math.isfinite(choice.step_s) else whole, steps, pricer)
        size_of = {i: g.size for g in grouped.groups for i in g.items}
        held_of = {}
    return grouped, [pricer.decision(size_of[i], step, held_of.get(i, 0)) for i, step in enumerate(steps)]


def _state_planner(opts, cluster, budget_bytes: int, p: int) -> None:
    """Rank 0 says what plans the run, and warns when the cluster's GPU is not the present one (stderr)."""
    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import collectives as comm

    if comm.rank() != 0:
        return
    print(run_summary.planner_line(opts, cluster, budget_bytes, p), file=sys.stderr)
    warning = run_summary.device_warning(cluster, run_summary.present_device())
    if warning:
        print(warning, file=sys.stderr)


def train(opts, group=None, *, quiet: bool = False) -> list[dict]:
    """`paradyse_lab.runtime.training.loop.train` on this rank with `plan_policy`; returns the per-step log. Rank 0
    states what plans
    the run before the first step (`plan_policy`) and prints the end-of-run summary after the last,
    unless `quiet` (a caller running many short runs, as validate-run)."""
    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import collectives as comm

    # lazy: safetensors: only checkpoint paths need it
    from paradyse_lab.runtime.training.loop import train as run_training

    opts = with_folder_weights(opts)
    log = run_training(opts, group, policy_for=partial(plan_policy, opts, quiet=quiet),
                       groups_for=partial(group_planner, opts))
    if comm.rank(group) == 0 and not quiet:
        cluster = run_cluster(opts, comm.size(group))
        print("\n".join(run_summary.summary_lines(log, opts, cluster)), flush=True)
    return log


def preflight(opts, p: int) -> None:
    """Build what `train` builds from names (model, cluster, workload, policy, tokens) for world size `p`, and
    read the layout and model of the checkpoint a resume takes; a bad one raises `UserInputError` here, before any
    rank starts."""
    # lazy: torch and safetensors, which the checkpoint folder and the weight files need
    from paradyse_lab.runtime.checkpoints.layout import check_resumed_model
    from paradyse_lab.runtime.checkpoints.resume_identity import architecture_of
    from paradyse_lab.runtime.hf.weights import check_folder, model_source

    check_options(opts)
    spec = replace(get_model(model_source(opts.model, opts.init_from)), dtype="fp32")
    cfg = spec
    vocab = cfg.vocab_size
    if opts.init_from:
        check_folder(opts.init_from, cfg)  # every tensor's shape, from the files' headers
    if opts.resume and opts.checkpoint_dir:  # another layout or model: the ranks' refusal, from meta.json alone
        check_resumed_model(opts.checkpoint_dir, architecture_of(cfg), opts.model)
    plan_policy(opts, spec, p, cost_model="analytic", quiet=True)  # names only: a learned model is fitted by the ranks
    group_planner(replace(opts, cost_model="analytic"), spec, p)
    for dataset in filter(None, (opts.dataset, opts.eval_dataset)):
        if TokenDocuments.from_options(opts, dataset, vocab) is None:
            get_workload(dataset, size=opts.steps, seed=opts.seed)
