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
    assert list(table.series) == ["ParaDySe", "ours", "Megatron", "smallest-fit CP", "best static"]
    ours = table[table.series == "ours"].iloc[0]
    assert ours.vs_paradyse >= 1 - 1e-12 and ours.vs_megatron >= 1 - 1e-12
    assert table.megatron_per_rank.nunique() == 1 and table.megatron_per_rank.iloc[0] >= 512
    assert table[table.series == "ParaDySe"].iloc[0].group_sizes == "8 | 8"  # one group of all GPUs, 2 steps
    assert (table.tokens > 0).all() and table[table.series == "best static"].policy.iloc[0].startswith("static:")


def test_finished_runs_are_reused_and_the_targets_are_checked(panel):
    root, setup, table = panel
    again = with_speedups(pd.DataFrame(run_panel(setup, "a100-80gb-x8", "github_code", "bert", root, False)))
    assert again.drop(columns=["plan_ms_mean", "plan_ms_max"]).equals(
        table.drop(columns=["plan_ms_mean", "plan_ms_max"]))
    checks = {name: met for name, met, _ in target_checks(table)}
    assert checks["never slower than ParaDySe or Megatron"] and checks["longest length trained unchanged"]
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
    assert "| a100-80gb-x8 | GitHubCode, BERT |" in text and "never slower than ParaDySe or Megatron" in text


def test_ours_is_compared_with_megatron_on_its_sequences_and_a_panel_it_cannot_train():
    rows = [dict(cluster="c", dataset="d", model=m, series=s, tokens_per_s=v, tokens_per_s_megatron_batches=w)
            for m, mega in (("a", 5.0), ("b", 0.0))
            for s, v, w in (("ParaDySe", 10.0, None), ("ours", 20.0, 15.0), ("Megatron", mega, None))]
    table = with_speedups(pd.DataFrame(rows)).set_index(["model", "series"])
    assert table.vs_megatron[("a", "ours")] == pytest.approx(3.0)  # 15 on Megatron's sequences over its 5
    assert table.vs_megatron[("b", "ours")] != table.vs_megatron[("b", "ours")]  # nan: Megatron trains nothing
    assert table.vs_paradyse[("b", "ours")] == pytest.approx(2.0)
