"""The paper's experiments in simulation: what their runs share (`Setup`, `run_one`), and Figure 2's six panels.

`paradyse-lab experiment fig2` runs Figure 2 and writes results/runs/fig2/*.csv (one per run),
results/fig2_summary.csv, results/fig2_headline.csv, results/fig2_vs_baselines.csv and (with our series beyond
the paper) results/fig2_beyond.csv. Paper numbers: docs/paper.md section 7. Table 5's ablations
and packing (beyond the paper) are experiments of their own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from paradyse_lab.cluster.files import cluster_with_gpus, get_cluster
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import USABLE
from paradyse_lab.costmodel.factory import build_cost_model, needs_profile
from paradyse_lab.costmodel.profiles import PAPER_PROFILE, default_profile
from paradyse_lab.errors import UserInputError
from paradyse_lab.results.timings import write_with_timings
from paradyse_lab.simulator import shared
from paradyse_lab.simulator.engine import TIMING_COLUMNS, simulate
from paradyse_lab.simulator.planner import build_planner
from paradyse_lab.simulator.policies import DEFAULT_GAMMA
from paradyse_lab.simulator.policy_spec import PolicySpec
from paradyse_lab.simulator.results import DEFAULT_RESULTS_DIR, load_or_run, run_path, write_csv_atomic
from paradyse_lab.simulator.run_metrics import length_extension, summarize, time_reduction, time_to_reach
from paradyse_lab.workload.lengths import get_workload

DATASETS = ("github_code", "grch38")
MODELS = ("bert", "llama", "gpt")
STATIC_POLICIES = tuple(f"static:{s}" for s in USABLE)
PAPER_POLICY = "dynamic:heuristic"
EXACT_POLICIES = ("dynamic:dp", "dynamic:ilp")
TECHNIQUES_POLICY = "dynamic:dp+recompute+tiled+offload+sublayer"
OURS_POLICIES = ("dynamic:dp+recompute", "dynamic:dp+recompute+sublayer", TECHNIQUES_POLICY)
"""Beyond the paper: exact planning with recomputation as a per-layer option, per sub-layer, and per sub-layer with
the tiled MLP and activation offload offered too (docs/tiled_mlp_and_offload.md: the planner takes them only where
they make a plan fit or make it faster)."""
TWO_D_POLICY = "dynamic:dp+recompute+tiled+offload+2d+sublayer"
"""Beyond the paper, with `experiment fig2 --two-d`: the techniques series with every strategy of `TWO_D` offered
too (Ulysses x ring and tensor x context parallel at every degree that splits the model, and Ulysses with uneven
heads where p does not divide them)."""
STATIC_RECOMPUTE_POLICIES = tuple(f"static:{s}+recompute" for s in USABLE)
"""The fair baselines for them: every layer recomputed."""
EXPERIMENT_SIZE = 200
"""Sequences per sampled dataset in the experiments (seeded; sorted ascending)."""

PAPER_HEADLINES = {
    ("github_code", "bert", "time_reduction"): 0.8929,
    ("github_code", "gpt", "length_extension"): 1.4416,
    ("grch38", "bert", "time_reduction"): 0.5801,
    ("grch38", "gpt", "length_extension"): 1.8122,
}
"""docs/paper.md section 7: up to 89.29% / 58.01% less time, up to 144.16% / 181.22% longer sequences."""

SUMMARY_TIMING_COLUMNS = ("planning_overhead_frac", "solve_ms_per_planned_step")
"""fig2_summary.csv's measured columns (planning wall time), kept in timings/fig2_summary.csv."""


@dataclass(frozen=True)
class Setup:
    """What every run of an experiment shares."""

    cluster: str = "a100-80gb-x8"
    gpus: int | None = None
    """GPU count the cluster is taken at (None: its own, `cluster_with_gpus`)."""
    size: int = EXPERIMENT_SIZE
    seed: int = 0
    sampling: str = "stratified"
    """How the paper datasets' band counts are chosen (`SAMPLINGS`)."""
    reserve_bytes: int | None = None
    """Device memory kept out of the budget (CUDA context, NCCL buffers, allocator); None: the cluster's
    (`ClusterSpec.plan_budget_bytes`, docs/hardware.md section 5)."""
    gamma: float = DEFAULT_GAMMA
    profiles: str = ""
    """Profile CSV the learned cost models are fitted on; empty: the bundled paper profile under the paper
    truth, else the cluster's bundled profile."""
    truth: str = "analytic"
    """Cost model that charges every step, and that plans unless a run says otherwise (`COST_MODEL_NAMES`)."""
    switch_memory: bool = False
    """Charge the caching allocator's reservations of every strategy used so far (engine.Charger)."""
    recompute: bool = False
    """Dynamic policies also offer every strategy with recomputation (static ones recompute every layer)."""
    granularity: str = "block"
    """Decisions per block (the paper) or per sub-layer; a policy's own suffixes add to these."""
    pack_tokens: int | None = None
    """Pack the dataset's documents into steps of at most this many tokens (None: one sequence per step)."""
    pack_order: str = "sorted"
    """First-fit order of the packing."""

    def __post_init__(self):
        if self.reserve_bytes is None:
            cluster = get_cluster(self.cluster)
            object.__setattr__(self, "reserve_bytes", cluster.memory_bytes - cluster.plan_budget_bytes)

    def profile_path(self) -> str:
        """The profile the learned and calibrated cost models of this setup are fitted on."""
        if self.profiles:
            return self.profiles
        if self.truth == "paper":
            return str(PAPER_PROFILE)
        return str(default_profile(self.cluster_spec().device))

    def cluster_spec(self):
        """The `ClusterSpec` of `cluster` at `gpus`."""
        return cluster_with_gpus(get_cluster(self.cluster), self.gpus)


def run_one(setup: Setup, model_name: str, dataset: str, policy_spec: str, *, smoothing: bool = True,
            exclude: tuple[str, ...] = (), progress: bool = False, plan_cost_model: str | None = None,
            truth_cost_model: str | None = None, extra_lengths: tuple[int, ...] = ()) -> pd.DataFrame:
    """Simulate one (model, dataset, policy) run: plan with `plan_cost_model`, charged by `truth_cost_model`
    (both default to `setup.truth`). `extra_lengths`: sequences added to the sampled ones (one sequence per
    step; sorted in when the workload is sorted).

    Names: `paradyse_lab.costmodel.factory.COST_MODEL_NAMES` or a .joblib file. A learned
    planning model of the paper's kind caps the policy's budget at its OOM threshold (the largest peak seen
    while profiling).
    """
    planner, charger = run_planner(setup, model_name, policy_spec, smoothing=smoothing, exclude=exclude,
                                   plan_cost_model=plan_cost_model, truth_cost_model=truth_cost_model)
    workload = get_workload(dataset, setup.size, setup.seed, pack_tokens=setup.pack_tokens,
                            pack_order=setup.pack_order, sampling=setup.sampling)
    if extra_lengths:
        if workload.packs is not None:
            raise UserInputError("added lengths need one sequence per step: leave out --pack-tokens")
        workload = replace(workload, name=f"{workload.name}+{len(extra_lengths)} added",
                           lengths=tuple(sorted(workload.lengths + tuple(extra_lengths))))
    return simulate(workload, planner.policy, charger, progress=progress)


def run_planner(setup: Setup, model_name: str, policy_spec: str, *, smoothing: bool = True,
                exclude: tuple[str, ...] = (), plan_cost_model: str | None = None,
                truth_cost_model: str | None = None):
    """The (planner, charger) of one run of `run_one`, before its first step."""
    truth_cost_model = truth_cost_model or setup.truth
    plan_cost_model = plan_cost_model or truth_cost_model
    model, cluster = get_model(model_name), setup.cluster_spec()
    fitted = any(needs_profile(name, cluster) for name in (plan_cost_model, truth_cost_model))
    profiles = setup.profile_path() if fitted else None  # only fitted models read a profile

    def built(name: str):
        return shared.cost_model(lambda: build_cost_model(name, model, cluster, profiles=profiles), name,
                                 f"{model_name} at {cluster.gpus} GPUs", setup.cluster, profiles)

    truth = built(truth_cost_model)
    plan = truth if plan_cost_model == truth_cost_model else built(plan_cost_model)
    budget = cluster.memory_bytes - setup.reserve_bytes
    planner = build_planner(policy_spec, model, cluster, cost_model=plan, budget_bytes=budget,
                            recompute=setup.recompute, granularity=setup.granularity, gamma=setup.gamma,
                            smoothing=smoothing, exclude=exclude)
    return planner, planner.charger(truth, setup.switch_memory)


def fig2(setup: Setup, root=DEFAULT_RESULTS_DIR, force: bool = False, exact: bool = True,
         models=MODELS, datasets=DATASETS, progress: bool = True,
         beyond: bool = False, two_d: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Six panels x (four static strategies, the paper's heuristic, and dp / ilp): summaries and headlines.

    With `beyond`, also our series (`OURS_POLICIES`, `STATIC_RECOMPUTE_POLICIES`) and fig2_beyond.csv; with
    `two_d` too, `TWO_D_POLICY` among them.
    """
    if two_d and not beyond:
        raise UserInputError("--two-d adds a series beyond the paper: it cannot go with --paper-policies-only")
    def names(specs) -> tuple[str, ...]:
        """Each policy as the run will be (the setup's --recompute / --granularity applied), once."""
        return tuple(dict.fromkeys(PolicySpec.parse(p, setup.recompute, setup.granularity).name for p in specs))

    statics = names(STATIC_POLICIES)
    paper_dynamic = names((PAPER_POLICY,) + (EXACT_POLICIES if exact else ()))
    ours = names(OURS_POLICIES + (TWO_D_POLICY,) * two_d + STATIC_RECOMPUTE_POLICIES) if beyond else ()
    policies = tuple(dict.fromkeys(statics + paper_dynamic + ours))
    jobs = [(d, m, p) for d in datasets for m in models for p in policies]
    runs: dict = {}
    with shared.sharing():  # the runs share cost models and problems
        for d, m, p in tqdm(jobs, desc="fig2 runs", unit="run", disable=not progress):
            path = run_path(root, "fig2", d, m, p)
            runs[d, m, p], _ = load_or_run(path, lambda d=d, m=m, p=p: run_one(setup, m, d, p), force,
                                           settings={**asdict(setup), "run": [d, m, p]},
                                           timing_columns=TIMING_COLUMNS)
    summary_of = {k: summarize(runs[k], k[1], k[0], k[2]) for k in jobs}  # once per run, for every table below
    summaries = pd.DataFrame([summary_of[k].to_dict() for k in jobs])
    planned = [runs[k][~runs[k]["cached"].astype(bool)] for k in jobs]
    summaries["solve_ms_per_planned_step"] = [float(r["solve_ms"].mean()) if len(r) else 0.0 for r in planned]
    write_with_timings(summaries, Path(root) / "fig2_summary.csv", SUMMARY_TIMING_COLUMNS,
                       ("dataset", "model", "policy"))
    write_csv_atomic(vs_baselines(runs, summary_of, datasets, models, statics, paper_dynamic),
                     root / "fig2_vs_baselines.csv")
    beyond_path = Path(root) / "fig2_beyond.csv"
    if beyond:
        write_csv_atomic(beyond_the_paper(summaries, runs), beyond_path)
    else:
        beyond_path.unlink(missing_ok=True)  # no stale table beside a summary without its series
    headline_rows = []
    for d in datasets:
        for m in models:
            base_summ = [summary_of[d, m, b] for b in statics]
            for p in paper_dynamic:
                dyn = runs[d, m, p]
                reductions = {b: time_reduction(dyn, runs[d, m, b]) for b in statics}
                valid = {b: r for b, r in reductions.items() if r is not None}
                best_b = max(valid, key=valid.get) if valid else None
                headline_rows.append({
                    "dataset": d, "model": m, "policy": p,
                    "max_time_reduction": valid[best_b] if best_b else None, "against": best_b,
                    "length_extension": length_extension(summary_of[d, m, p], base_summ, "best"),
                    "max_length_extension": length_extension(summary_of[d, m, p], base_summ, "worst"),
                    "paper_time_reduction": PAPER_HEADLINES.get((d, m, "time_reduction")),
                    "paper_length_extension": PAPER_HEADLINES.get((d, m, "length_extension")),
                })
    headlines = pd.DataFrame(headline_rows)
    write_csv_atomic(headlines, root / "fig2_headline.csv")
    return summaries, headlines


BEYOND_SERIES = (("ParaDySe (heuristic)", PAPER_POLICY), ("dp", "dynamic:dp"),
                 ("dp + recompute", "dynamic:dp+recompute"),
                 ("dp + recompute + sub-layer", "dynamic:dp+recompute+sublayer"),
                 ("+ tiled MLP + offload", TECHNIQUES_POLICY),
                 ("+ 2-D strategies", TWO_D_POLICY))
"""Label and policy of each series of fig2_beyond.csv, beside the best static strategy with recomputation."""


def technique_use(run: pd.DataFrame) -> dict:
    """Where a run's plans took the tiled MLP or activation offload: the steps trained with each, and the shortest
    sequence whose plan took either (None: no step did)."""
    trained = run[~run["oom"].astype(bool)]
    plans = trained["plan"].astype(str).str.split(" ")
    tiled = plans.map(lambda names: any("+tiled" in n for n in names))
    offload = plans.map(lambda names: any("+offload" in n for n in names))
    either = trained.loc[tiled | offload, "seq_len"]
    return {"tiled_steps": int(tiled.sum()), "offload_steps": int(offload.sum()),
            "shortest_with_technique": int(either.min()) if len(either) else None}


def beyond_the_paper(summaries: pd.DataFrame, runs: dict) -> pd.DataFrame:
    """Per panel: longest length trained and cumulative time of the paper's heuristic, dp, our series, and the
    best static strategy with recomputation (longest reach, then least time), with where each series' plans took
    the tiled MLP or offload (`technique_use`; `runs` by (dataset, model, policy)) (fig2_beyond.csv)."""
    rows = []
    for (d, m), g in summaries.groupby(["dataset", "model"], sort=False):
        statics = g[g.policy.isin(STATIC_RECOMPUTE_POLICIES)].sort_values(["max_seq_len_trained", "total_time_s"],
                                                                          ascending=[False, True])
        picks = [(label, g[g.policy == p].iloc[0]) for label, p in BEYOND_SERIES if (g.policy == p).any()]
        picks.append(("best static + recompute", statics.iloc[0]))
        for label, r in picks:
            rows.append({"dataset": d, "model": m, "series": label, "policy": r.policy,
                         "max_seq_len_trained": int(r.max_seq_len_trained), "total_time_s": float(r.total_time_s),
                         "oom_at_seq_len": r.oom_at_seq_len, "steps": int(r.steps),
                         **technique_use(runs[d, m, r.policy])})
    return pd.DataFrame(rows)


def vs_baselines(runs: dict, summaries: dict, datasets, models, statics, dynamic) -> pd.DataFrame:
    """Per panel, dynamic policy and baseline: the time the policy needs to reach the baseline's longest
    length, beside the baseline's own time there (fig2_vs_baselines.csv). `runs` and `summaries` (each run's
    `summarize`) by (dataset, model, policy)."""
    rows = []
    for d in datasets:
        for m in models:
            for p in dynamic:
                dyn = runs[d, m, p]
                for b in statics:
                    base = summaries[d, m, b]
                    t_dyn = time_to_reach(dyn, base.steps)
                    rows.append({"dataset": d, "model": m, "policy": p, "baseline": b,
                                 "baseline_max_len": base.max_seq_len_trained, "baseline_time_s": base.total_time_s,
                                 "policy_time_at_baseline_max_len_s": t_dyn,
                                 "time_reduction": time_reduction(dyn, runs[d, m, b])})
    return pd.DataFrame(rows)
