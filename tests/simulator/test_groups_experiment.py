"""`experiment groups` on one tiny panel: every series, ours never slower, the reuse of finished runs, the
targets, and the figure's bars read back against groups.csv."""

import pandas as pd
import pytest

from paradyse_lab.simulator.groups_experiment import GroupsSetup, run_panel, target_checks, with_speedups


@pytest.fixture(scope="module")
def panel(tmp_path_factory):
    root = tmp_path_factory.mktemp("groups")
    setup = GroupsSetup(size=6, global_batch=3, node_counts=(1,))
    table = with_speedups(pd.DataFrame(run_panel(setup, "a100-80gb-x8", "github_code", "bert", root, False)))
    return root, setup, table


def test_a_panel_has_every_series_and_ours_is_never_slower(panel):
    _, _, table = panel
    assert list(table.series) == ["ParaDySe", "ours", "dynamic CP", "best static"]
    ours = table[table.series == "ours"].iloc[0]
    assert ours.vs_paradyse >= 1 - 1e-12 and ours.vs_dynamic_cp >= 1 - 1e-12
    assert table[table.series == "ParaDySe"].iloc[0].group_sizes == "8 | 8"  # one group of all GPUs, 2 steps
    assert (table.tokens > 0).all() and table[table.series == "best static"].policy.iloc[0].startswith("static:")


def test_finished_runs_are_reused_and_the_targets_are_checked(panel):
    root, setup, table = panel
    again = with_speedups(pd.DataFrame(run_panel(setup, "a100-80gb-x8", "github_code", "bert", root, False)))
    assert again.drop(columns=["plan_ms_mean", "plan_ms_max"]).equals(
        table.drop(columns=["plan_ms_mean", "plan_ms_max"]))
    checks = {name: met for name, met, _ in target_checks(table)}
    assert checks["never slower than ParaDySe or dynamic CP"] and checks["longest length trained unchanged"]
    assert ">= 1.5x ParaDySe, bert on github_code, a100-80gb-x8" in checks


def test_the_figure_draws_each_series_over_paradyse(panel, tmp_path):
    _, _, table = panel
    table.to_csv(tmp_path / "groups.csv", index=False)
    from paradyse_lab.figures import _common, groups

    fig = groups.draw(_common.parse_args(["--results", str(tmp_path)], "groups"))
    seen = {}
    for ax in fig.axes:
        for bar in ax.patches:
            if bar.get_gid():
                seen[bar.get_gid()] = bar.get_height()
    expected = {f"github_code|bert|1|{r.series}": r.vs_paradyse for r in table.itertuples()}
    assert seen == pytest.approx(expected)
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_report_section_shows_the_command_the_table_and_the_targets(panel, tmp_path):
    from paradyse_lab.app.report.groups import groups_section

    assert "(not run: `paradyse-lab experiment groups" in groups_section(tmp_path)
    _, _, table = panel
    table.to_csv(tmp_path / "groups.csv", index=False)
    text = groups_section(tmp_path)
    assert f"paradyse-lab experiment groups --out {tmp_path}" in text
    assert "| a100-80gb-x8 | GitHubCode, BERT |" in text and "never slower than ParaDySe or dynamic CP" in text
