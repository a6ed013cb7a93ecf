"""Packing in simulation (beyond the paper): Figure 2's panels with the documents packed into steps of 32K and
128K tokens beside one sequence per step.

`paradyse-lab experiment packing` runs it and writes results/runs/packing/*.csv (one per run) and
results/packing.csv.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from paradyse_lab.simulator import shared
from paradyse_lab.simulator.engine import TIMING_COLUMNS
from paradyse_lab.simulator.experiments import DATASETS, MODELS, PAPER_POLICY, STATIC_POLICIES, Setup, run_one
from paradyse_lab.simulator.results import DEFAULT_RESULTS_DIR, load_or_run, run_path, write_csv_atomic
from paradyse_lab.simulator.run_metrics import summarize

PACKING_BUDGETS = (32 * 1024, 128 * 1024)
"""Tokens per step of the packing experiment (beside one sequence per step)."""
PACKING_POLICIES = STATIC_POLICIES + (PAPER_POLICY, "dynamic:dp")


def packing(setup: Setup, root=DEFAULT_RESULTS_DIR, force: bool = False, budgets=PACKING_BUDGETS,
            panels=None, progress: bool = True) -> pd.DataFrame:
    """Figure 2's panels (default every dataset x model) with one sequence per step and packed into steps
    of each of `budgets` tokens (first-fit decreasing, steps short to long), static strategies against the
    paper's heuristic and dp: time per token, longest document trained, plans (results/packing.csv)."""
    panels = list(panels) if panels is not None else [(d, m) for d in DATASETS for m in MODELS]
    jobs = [(d, m, b, p) for d, m in panels for b in (None,) + tuple(budgets) for p in PACKING_POLICIES]
    rows = []
    with shared.sharing():
        for d, m, budget, p in tqdm(jobs, desc="packing runs", unit="run", disable=not progress):
            run_setup = replace(setup, pack_tokens=budget)
            path = run_path(root, "packing", d, m, f"pack-{budget or 'off'}", p)
            runs, _ = load_or_run(path, lambda s=run_setup, d=d, m=m, p=p: run_one(s, m, d, p), force,
                                  settings={**asdict(run_setup), "run": [d, m, p]}, timing_columns=TIMING_COLUMNS)
            rows.append(packing_row(runs, setup, d, m, budget, p))
    table = pd.DataFrame(rows)
    write_csv_atomic(table, Path(root) / "packing.csv")
    return table


def packing_row(runs: pd.DataFrame, setup: Setup, dataset: str, model: str, budget: int | None,
                policy: str) -> dict:
    """One run of the packing experiment (its setup named: truth, cluster, size, seed, reserve, gamma,
    profiles): what it trained, how fast per token, with which strategies
    (`strategy_mix`: each strategy's share of layers x tokens over the trained steps); `oom_at_doc` and
    `oom_at_tokens`: the longest document and the tokens of the step that ran out of memory."""
    s = summarize(runs, model, dataset, policy)
    trained, oom = runs[~runs["oom"].astype(bool)], runs[runs["oom"].astype(bool)]
    documents = int(trained["documents"].sum())
    mix: dict[str, float] = {}  # share of (layer x token) each strategy ran, over the trained steps
    for plan, tokens in zip(trained["plan"], trained["tokens"]):
        names = plan.split()
        for name in names:
            mix[name] = mix.get(name, 0.0) + tokens / len(names)
    total = sum(mix.values())
    return {"truth": setup.truth, "cluster": setup.cluster, "size": setup.size, "seed": setup.seed,
            "sampling": setup.sampling,
            "reserve_bytes": setup.reserve_bytes, "gamma": setup.gamma, "profiles": setup.profiles,
            "dataset": dataset, "model": model, "pack_tokens": budget or 0,
            "pack_order": setup.pack_order if budget else "", "policy": policy, "steps": s.steps,
            "documents_trained": documents, "documents": setup.size, "finished": documents == setup.size,
            "tokens_trained": s.tokens_trained,
            "padding_tokens": int((trained["padded_len"] - trained["tokens"]).sum()),  # per document
            "total_time_s": s.total_time_s,
            "time_per_token_us": 1e6 * s.total_time_s / s.tokens_trained if s.tokens_trained else None,
            "max_doc_trained": s.max_seq_len_trained, "oom_at_doc": s.oom_at_seq_len,
            "oom_at_tokens": int(oom["tokens"].iloc[0]) if len(oom) else None,
            "strategy_mix": ";".join(f"{k}:{v / total:.3f}" for k, v in sorted(mix.items(), key=lambda kv: -kv[1]))}
