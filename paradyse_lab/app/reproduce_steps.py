"""The steps of `paradyse-lab reproduce` by name: their order (`STEPS`), their functions (`STEP_FUNCS`, each
(DIR, `Settings`, force) -> the files it wrote), which a `--quick` run skips and which run in processes of their
own; and the last step, the report."""

from __future__ import annotations

from pathlib import Path

from paradyse_lab.app.report import write_report
from paradyse_lab.app.reproduce_experiment_steps import (
    step_fig2,
    step_fig2_paper,
    step_groups,
    step_packing,
    step_seeds,
    step_switch_memory,
    step_table5,
    step_table5_paper,
)
from paradyse_lab.app.reproduce_figures import step_figures
from paradyse_lab.app.reproduce_planner_steps import (
    step_costmodel,
    step_costmodel_paper,
    step_memory,
    step_plan_map,
    step_solvers,
    step_two_d,
)
from paradyse_lab.app.reproduce_settings import Settings

STEPS = ("fig2", "table5", "fig2_paper", "table5_paper", "seeds", "switch_memory", "packing", "solvers",
         "costmodel", "costmodel_paper", "plan_map", "memory", "two_d", "groups", "figures", "report")
"""In the order the loop takes them. `groups` and `solvers` (`BACKGROUND_STEPS`) run in processes of their own
from the start; `groups` is waited for only before the figures, its one reader."""
FULL_ONLY_STEPS = ("groups",)
"""Steps a `--quick` run skips (they take minutes): they write none of their outputs there."""
BACKGROUND_STEPS = ("groups", "solvers")
"""Steps that read no other step's output and share no cost model with them: a full run starts each in a
process of its own at its start (beside the foreground's steps on the second core), and stamps them when the
loop reaches them."""


def step_report(out: Path, s: Settings, force: bool, timings: dict | None = None) -> list[str]:
    """DIR/REPORT.md, the paper's numbers beside ours, with each step's seconds (`timings`)."""
    write_report(out, s, timings or {})
    return ["REPORT.md"]


STEP_FUNCS = {"fig2": step_fig2, "table5": step_table5, "fig2_paper": step_fig2_paper,
              "table5_paper": step_table5_paper, "seeds": step_seeds, "switch_memory": step_switch_memory,
              "packing": step_packing, "groups": step_groups,
              "solvers": step_solvers, "costmodel": step_costmodel, "costmodel_paper": step_costmodel_paper,
              "plan_map": step_plan_map, "memory": step_memory, "two_d": step_two_d, "figures": step_figures,
              "report": step_report}
