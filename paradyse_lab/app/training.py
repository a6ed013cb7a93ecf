"""Training with a planner: the runtime's training loop (runtime/train.py) driven by the simulator's policies.

`train(opts, group)` is what `paradyse-lab train` runs on every rank (paradyse_lab/cli/train_command.py);
`plan_policy(opts, spec, p)` builds the policy that plans each step (simulator/policies.py: `static:NAME`,
`dynamic:SOLVER`, ...) with `--cost-model` on `--cluster`; `preflight(opts, p)` builds everything `train`
builds from names once, so that `--nproc N` refuses a bad name or value before it spawns a rank.
The runtime itself knows no planner: it calls the `policy_for` it is given.
"""

from __future__ import annotations

from functools import partial


def plan_policy(opts, spec, p: int, cost_model: str | None = None, *, quiet: bool = False):
    """The policy of `opts` (a `train_options.TrainOptions`) for the model `spec` at world size `p`, planning with
    `cost_model` (default `opts.cost_model`) on `opts.cluster` (simulator/planner.py). Rank 0 states what plans
    the run (and warns when the cluster's GPU is not the one present) unless `quiet`."""
    from paradyse_lab.cluster_spec import DEFAULT_CLUSTER, get_cluster
    from paradyse_lab.units import gib_to_bytes
    from simulator.planner import build_planner

    cluster = get_cluster(opts.cluster or DEFAULT_CLUSTER)
    budget = gib_to_bytes(opts.budget_gib) if opts.budget_gib else None
    planner = build_planner(opts.policy, spec, cluster, cost_model=cost_model or opts.cost_model, p=p,
                            profiles=opts.profiles or None, budget_bytes=budget, recompute=opts.recompute,
                            granularity=opts.granularity)
    if not quiet:
        _state_planner(opts, cluster, planner.cost_model.budget_bytes(planner.budget_bytes), p)
    return planner.policy


def _state_planner(opts, cluster, budget_bytes: int, p: int) -> None:
    """Rank 0 says what plans the run, and warns when the cluster's GPU is not the present one (stderr)."""
    import sys

    from paradyse_lab.app import run_summary
    from runtime import comm

    if comm.rank() != 0:
        return
    print(run_summary.planner_line(opts, cluster, budget_bytes, p), file=sys.stderr)
    warning = run_summary.device_warning(cluster, run_summary.present_device())
    if warning:
        print(warning, file=sys.stderr)


def train(opts, group=None, *, quiet: bool = False) -> list[dict]:
    """`runtime.train.train` on this rank with `plan_policy`; returns the per-step log. Rank 0 states what plans
    the run before the first step (`plan_policy`) and prints the end-of-run summary after the last
    (paradyse_lab/app/run_summary.py), unless `quiet` (a caller running many short runs, as validate-run)."""
    from paradyse_lab.app import run_summary
    from paradyse_lab.cluster_spec import DEFAULT_CLUSTER, get_cluster
    from runtime import comm
    from runtime.train import train as run_training

    log = run_training(opts, group, policy_for=partial(plan_policy, opts, quiet=quiet))
    if comm.rank(group) == 0 and not quiet:
        cluster = get_cluster(opts.cluster or DEFAULT_CLUSTER)
        print("\n".join(run_summary.summary_lines(log, opts, cluster.name)), flush=True)
    return log


def preflight(opts, p: int) -> None:
    """Build what `train` builds from names (model, cluster, workload, policy, tokens) for world size `p`;
    a bad one raises `UserInputError` here, before any rank starts."""
    from dataclasses import replace

    from paradyse_lab.model_spec import get_model
    from paradyse_lab.workloads import get_workload
    from runtime.hf_weights import model_source
    from runtime.reference import GPTConfig
    from runtime.train_inputs import TokenDocuments, check_options

    check_options(opts)
    spec = replace(get_model(model_source(opts.model, opts.init_from)), dtype="fp32")
    GPTConfig.from_model_spec(spec)
    plan_policy(opts, spec, p, cost_model="analytic", quiet=True)  # names only: a learned model is fitted by the ranks
    for dataset in filter(None, (opts.dataset, opts.eval_dataset)):
        if TokenDocuments.from_options(opts, dataset) is None:
            get_workload(dataset, size=opts.steps, seed=opts.seed)
