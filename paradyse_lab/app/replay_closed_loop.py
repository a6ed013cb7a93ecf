"""The replay cost model on a closed loop: every step `validate-run` executed, priced from the machine's measured
kernel tables (`calibrate`'s DIR/kernels/), beside what was measured.

`replay_steps(DIR, skip)` returns `validate-run`'s step rows (simulator.replay.STEP_COLUMNS) with `predicted_s`
the replay model's price of the plan that ran: each layer's attention and MLP sub-layers traced from the runtime
(`SublayerTraces`, on the CPU's kernels when the run was on a CPU) at the step's length, the whole
stack's operations priced on the critical path with the tables' measured per-operation dispatch cost (nothing
fitted to the run), plus the analytic model's embedding, head and optimizer step on DIR's measured cluster (which
the sub-layer traces do not hold). Switching plans between steps costs nothing here, as in the runtime (every
rank holds the whole weights). `simulator.replay.compare` then gives the per-policy errors and rankings in the
form `validate-run` prints them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from paradyse_lab.app.replay_traces import SublayerTraces
from paradyse_lab.app.validate_run import META_FILE, pair
from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import CATALOG, OPTION_FLAGS, StrategyOption
from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.costmodel.replay.price import critical_path, measured_prices
from paradyse_lab.costmodel.replay.tables import KernelTables
from paradyse_lab.errors import UserInputError
from paradyse_lab.files.atomic_write import read_json_object

KERNELS_DIR = "kernels"


def options_of_plan(text: str, layers: int) -> list[tuple[StrategyOption, StrategyOption]]:
    """The (attention, MLP) options of each layer from a plan as the train log writes it (`TS,TS,ME+r`, one
    entry per layer or per sub-layer; core.plan.short_text)."""
    names = {e.abbreviation: n for n, e in CATALOG.items() if e.abbreviation}
    flags = {f[0]: f for f in OPTION_FLAGS}
    options = []
    for entry in text.split(","):
        base, *marks = entry.strip().split("+")
        name = names.get(base, base)
        options.append(StrategyOption(name, **{flags[m]: True for m in marks if m in flags}))
    if len(options) == layers:
        return [(o, o) for o in options]
    if len(options) == 2 * layers:
        return list(zip(options[0::2], options[1::2]))
    raise UserInputError(f"plan {text!r} has {len(options)} entries; the model has {layers} layers")


def replay_steps(out: str | Path, skip: int) -> pd.DataFrame:
    """`validate-run`'s pairing (paradyse_lab.app.validate_run.pair) with the replay model's prediction of each
    executed step (module docstring)."""
    out = Path(out)
    meta = read_json_object(out / META_FILE)
    tables = out / KERNELS_DIR
    if not (tables / "dispatch.csv").is_file():
        raise UserInputError(f"{tables}: no measured kernel tables; run `paradyse-lab calibrate --out {out}` first")
    spec = replace(get_model(meta["model"]), dtype=meta["dtype"])
    cluster = get_cluster(meta["cluster"] or str(out / "cluster.toml"))
    p = int(meta["p"])
    prices = measured_prices(KernelTables.read(tables), cluster)
    traces = SublayerTraces(spec, p, "cuda" if meta["dtype"] != "fp32" else "cpu")
    analytic = AnalyticCostModel(spec, cluster, p)
    steps = pair(out, skip)
    cache: dict = {}

    def price(plan: str, seq_len: int) -> float:
        key = (plan, seq_len)
        if key not in cache:
            ops = []
            for att, mlp in options_of_plan(plan, spec.layers):
                ops += traces.trace("attention", att, seq_len) + traces.trace("mlp", mlp, seq_len)
            fixed = analytic.fixed(seq_len)
            cache[key] = critical_path(ops, prices).time_s + fixed.time_s + fixed.optimizer_s
        return cache[key]

    steps["predicted_s"] = [price(plan, int(s)) for plan, s in zip(steps["plan"], steps["seq_len"])]
    steps["simulated_plan"] = steps["plan"]  # priced the plan that ran
    steps["plan_match"] = True
    counted = steps["predicted_s"].where(steps["counted"], 0.0)
    steps["predicted_cum_s"] = counted.groupby(steps["policy"], sort=False).cumsum()
    return steps
