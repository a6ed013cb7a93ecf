"""The closed loop's error per policy, with the replay cost model beside the analytic and the calibrated one.

Run after examples/closed_loop_benchmark.sh DIR (calibrate, then validate-run with the analytic, the calibrated
and the replay model, the last the default on a measured folder): `python examples/replay_closed_loop.py DIR
[--skip-steps 1]`. Prices every executed step with
the replay model from DIR/kernels/ (the tables `calibrate` measured, the dispatch cost measured, nothing fitted to
the run; paradyse_lab/app/replay_closed_loop.py), and prints per policy the measured total and each model's
error of the total and per-step MAPE, then whether each model's ranking agrees with the measured one (over all
pairs and over the pairs whose repeated runs' min-max totals do not overlap). Writes
DIR/validate_run_summary_replay.csv. The analytic and calibrated columns are read from
DIR/validate_run_summary_analytic.csv and DIR/validate_run_summary_calibrated.csv (each predicted the plans it
chose, against its own run's measurements); the replay column prices the plans of DIR's last run (the measured
column), replay's own when the benchmark ran it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from paradyse_lab.app.replay_closed_loop import replay_steps  # noqa: E402
from paradyse_lab.app.validate_run import run_totals  # noqa: E402
from paradyse_lab.simulator.replay import agreement_where_separated, compare  # noqa: E402


def _ranking_agrees(df: pd.DataFrame) -> str:
    """'yes' or the reversed pairs of a summary CSV's measured and predicted totals."""
    rows = df.dropna(subset=["predicted_total_s"]).to_dict("records")
    flipped = [f"{a['policy']} / {b['policy']}" for i, a in enumerate(rows) for b in rows[i + 1:]
               if (a["predicted_total_s"] - b["predicted_total_s"]) * (a["measured_total_s"] - b["measured_total_s"])
               < 0]
    return "yes" if not flipped else "no: " + "; ".join(flipped)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="the folder of calibrate and validate-run")
    parser.add_argument("--skip-steps", type=int, default=1, help="start-up steps left out (default 1)")
    args = parser.parse_args()
    out = Path(args.out)
    steps = replay_steps(out, args.skip_steps)
    policies = list(dict.fromkeys(steps["policy"]))
    statics = [p for p in policies if p.startswith("static:")]
    result = compare(steps, statics, [p for p in policies if p not in statics])
    totals = run_totals(out, args.skip_steps)
    separated = agreement_where_separated(result, totals)
    summary = pd.DataFrame([{"policy": k, **v} for k, v in result["policies"].items()])
    summary.to_csv(out / "validate_run_summary_replay.csv", index=False)
    models = {"replay": summary}
    for name in ("analytic", "calibrated"):
        file = f"validate_run_summary_{name}.csv"
        if (out / file).is_file():
            models[name] = pd.read_csv(out / file)
    header = ["policy", "measured s"] + [f"{m} {c}" for m in models for c in ("error", "step MAPE")]
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for policy in policies:
        cells = [policy, f"{result['policies'][policy]['measured_total_s']:.3f}"]
        for df in models.values():
            r = df[df["policy"] == policy]
            cells += ["-", "-"] if r.empty else [f"{r['total_error'].iloc[0]:+.1%}", f"{r['step_mape'].iloc[0]:.1%}"]
        print(" | ".join(cells))
    for name, df in models.items():
        print(f"{name}: rankings agree with the measured one: {_ranking_agrees(df)}")
    flipped = "; ".join(f"{a} / {b}" for a, b in separated["reversed"])
    print(f"replay, on the {separated['separated']} of {separated['pairs']} pairs the runs separate: "
          f"{'agree' if separated['agree'] else 'reversed: ' + flipped}")
    print(f"wrote {out / 'validate_run_summary_replay.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
