"""`paradyse-lab reproduce --quick` (one run per module, at `SETTINGS`' smaller scale) and every figures/ script on
its CSVs."""

from __future__ import annotations

import importlib
import runpy
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from paradyse_lab.app.reproduce import reproduce
from paradyse_lab.app.reproduce_outputs import (
    FIGURE_SCRIPTS,
    PAPER_DIR,
    PAPER_FIGURE_SCRIPTS,
    STEP_OUTPUTS,
    step_outputs,
)
from paradyse_lab.app.reproduce_settings import Settings
from paradyse_lab.app.reproduce_steps import FULL_ONLY_STEPS

ROOT = Path(__file__).resolve().parents[2]
CSVS = {"fig2_cumulative_time": "fig2_summary.csv", "table5_ablation": "table5.csv",
        "solver_quality": "solver_bench.csv", "costmodel_accuracy": "costmodel_points.csv",
        "plan_map": "plan_map.csv", "memory_breakdown": "memory_breakdown.csv", "packing": "packing.csv"}
SETTINGS = replace(Settings.make(quick=True), size=6, bench_sizes=(8,), map_lengths=6)
"""A quick run at a smaller scale: 6 sequences per sampled dataset (the longest still pinned), one size of solver
benchmark problem, 6 lengths in the plan map. Every step, CSV, figure and report section of `reproduce --quick`
still happens (the quick run's panels, policies, truths and cost models), in a fraction of its time."""


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> tuple[Path, dict]:
    """The quick run's folder, and each Figure its figures step drew, by (script, results folder): every
    figures/ module's `draw` wrapped to keep what it returns, so the tests below read the plotted values back
    from the very figures the run saved (drawn once, not again per test). The folder starts with a full run's
    table5_ablation.pdf in it, which the quick run's PNG alone removes (checked with every other PDF below)."""
    out = tmp_path_factory.mktemp("reproduce")
    (out / "figures").mkdir()  # a full run's PDF where the quick run draws: it must not stay beside the PNG
    (out / "figures" / "table5_ablation.pdf").write_bytes(b"%PDF-1.4 of an earlier full run")
    drawn: dict = {}
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name in FIGURE_SCRIPTS:
            module = importlib.import_module(f"paradyse_lab.figures.{name}")

            def keep(args, draw=module.draw, name=name):
                drawn.setdefault((name, Path(args.results)), []).append(fig := draw(args))
                return fig

            monkeypatch.setattr(module, "draw", keep)
        reproduce(out, settings=SETTINGS, progress=False, log=lambda m: None)
    return out, drawn


@pytest.fixture(scope="module")
def quick_results(quick_run) -> Path:
    return quick_run[0]


def test_reproduce_writes_csvs_figures_and_report(quick_results):
    quick = SETTINGS
    for step, outputs in STEP_OUTPUTS.items():
        for name in outputs:
            if step in FULL_ONLY_STEPS or name not in step_outputs(step, quick):  # minutes of work, a quick
                assert not (quick_results / name).exists(), name  # run skips it; its figures are PNG alone
            else:
                assert (quick_results / name).stat().st_size > 0, name
    report = (quick_results / "REPORT.md").read_text()
    for needle in ("89.29%", "181.22%", "Table 5", "source=analytic", "figures/fig2_cumulative_time.png",
                   "source=paper", "ours, paper-measured times: heuristic", "ours max len, analytic model",
                   "figures/fig2_cumulative_time_paper.png", "Leave one shape out", "memory price of switching",
                   "Beyond the paper", "dp + recompute trains the whole dataset",
                   "Packing documents into steps", "| GitHubCode, GPT | paper-measured times | 32K |"):
        assert needle in report
    assert quick.figure_formats == Settings.make(quick=True).figure_formats == ("png",)
    for name in FIGURE_SCRIPTS + tuple(f"{n}_paper" for n in PAPER_FIGURE_SCRIPTS):  # each script's main()
        assert (quick_results / "figures" / f"{name}.png").stat().st_size > 1000
        assert not (quick_results / "figures" / f"{name}.pdf").exists()
    beyond = pd.read_csv(quick_results / "fig2_beyond.csv")
    assert beyond.groupby(["dataset", "model"]).size().eq(6).all()
    gpt = beyond.query("dataset == 'grch38' and model == 'gpt'").set_index("series")
    assert gpt.loc["dp + recompute", "max_seq_len_trained"] > gpt.loc["ParaDySe (heuristic)", "max_seq_len_trained"]
    assert "tiled MLP and offload faster than recomputation alone" in report


def test_the_beyond_series_takes_the_tiled_mlp_and_offload_only_on_long_sequences(quick_results):
    """The planner takes the cheapest plan that fits: in the Figure 2 series that offers the tiled MLP and
    offload, a step whose plan takes neither is the plan (and time) of the same series without them, and the
    sequences short enough for the plain plans pay nothing (GitHubCode's BERT panel, up to 300K, takes neither);
    on GPT / GRCh38 they train the whole dataset faster than recomputation alone."""
    from paradyse_lab.simulator.experiments import TECHNIQUES_POLICY

    beyond = pd.read_csv(quick_results / "fig2_beyond.csv").set_index(["dataset", "model", "series"]).sort_index()
    ours = beyond.xs("+ tiled MLP + offload", level="series")
    assert (ours.policy == TECHNIQUES_POLICY).all()
    assert ours.loc[("github_code", "bert"), "offload_steps"] == ours.loc[("github_code", "bert"), "tiled_steps"] == 0
    assert ours["offload_steps"].sum() > 0
    gpt = beyond.loc[("grch38", "gpt")]
    assert gpt.loc["+ tiled MLP + offload", "max_seq_len_trained"] == gpt.loc["dp + recompute", "max_seq_len_trained"]
    assert gpt.loc["+ tiled MLP + offload", "total_time_s"] < gpt.loc["dp + recompute + sub-layer", "total_time_s"]
    for dataset, model in ours.index:
        runs = {p: pd.read_csv(quick_results / "runs" / "fig2" / f"{dataset}__{model}__{p.replace(':', '-')}.csv")
                for p in (TECHNIQUES_POLICY, "dynamic:dp+recompute+sublayer")}
        mine, plain = runs[TECHNIQUES_POLICY], runs["dynamic:dp+recompute+sublayer"]
        neither = ~mine["plan"].astype(str).str.contains(r"\+tiled|\+offload") & ~mine["oom"].astype(bool)
        first = int(neither.idxmin()) if not neither.all() else len(mine)  # up to the first step that takes one
        assert (mine["plan"][:first] == plain["plan"][:first]).all()
        assert list(mine["charged_time_s"][:first]) == pytest.approx(list(plain["charged_time_s"][:first]))


def test_report_states_the_samples_band_shares_and_the_seeds(quick_results):
    """REPORT.md's band shares are the sampled workloads' (measured from their lengths), Table 3's beside them;
    the seeds' headline table holds the seeds' values (quick: seed 0 alone, fig2's own headline)."""
    from paradyse_lab.app.report.markdown import md_table
    from paradyse_lab.app.report.seeds import band_share_rows, seed_spread
    from paradyse_lab.app.reproduce_outputs import HEADLINE_SEEDS_FILE
    from paradyse_lab.workload.lengths import get_workload

    settings = SETTINGS
    header, rows = band_share_rows(settings)
    report = (quick_results / "REPORT.md").read_text()
    assert md_table(header, rows) in report
    shares = get_workload("github_code", settings.size, 0).band_fractions()
    assert [r[1] for r in rows] == [f"{100 * f:.1f}%" for f in shares] and rows[-1][2] == "1.1%"
    seeds = pd.read_csv(quick_results / HEADLINE_SEEDS_FILE)
    headline = pd.read_csv(quick_results / "fig2_headline.csv").query("policy == 'dynamic:heuristic'")
    ours = seeds.query("truth == 'analytic'")
    assert list(ours.seed.unique()) == [0]
    assert list(ours.max_time_reduction) == pytest.approx(list(headline.max_time_reduction), nan_ok=True)
    spread = seed_spread(quick_results).query("truth == 'analytic' and dataset == 'github_code' and model == 'bert'")
    value = headline.query("dataset == 'github_code' and model == 'bert'").max_time_reduction.iloc[0]
    assert spread["mean"].iloc[0] == spread["min"].iloc[0] == spread["max"].iloc[0] == pytest.approx(value)
    assert "over 1 seed, mean [min, max]" in report


def test_first_row_is_the_first_row_of_the_filtered_table(quick_results):
    """The report's row lookup (`first_row`, one mask over the columns) is the first row that filtering the table
    column by column keeps, its index label included; no match is an `IndexError`."""
    from paradyse_lab.app.report.markdown import first_row

    summary = pd.read_csv(quick_results / "fig2_summary.csv")
    for (dataset, model, policy), _ in summary.groupby(["dataset", "model", "policy"], sort=False):
        kept = summary[summary.dataset == dataset]
        kept = kept[(kept.model == model) & (kept.policy == policy)]
        row = first_row(summary, dataset=dataset, model=model, policy=policy)
        assert row.name == kept.index[0] and row.equals(kept.iloc[0])
    assert first_row(summary, model="gpt").equals(summary[summary.model == "gpt"].iloc[0])
    with pytest.raises(IndexError):
        first_row(summary, dataset="grch38", model="no such model")


def test_reproduce_resumes_without_rerunning(quick_results, monkeypatch):
    """A second run reuses every step and rewrites REPORT.md alone, parsing each CSV the report reads once."""
    parsed = []
    monkeypatch.setattr(pd, "read_csv", lambda path, *a, read=pd.read_csv, **kw: parsed.append(
        Path(path).resolve()) or read(path, *a, **kw))
    report = (quick_results / "REPORT.md").read_text()
    timings = reproduce(quick_results, settings=SETTINGS, progress=False, log=lambda m: None)
    assert all(timings[step] == 0.0 for step in STEP_OUTPUTS)
    assert (quick_results / "REPORT.md").read_text().split("\n", 3)[3] == report.split("\n", 3)[3]  # less its steps
    assert len(parsed) > 20 and len(set(parsed)) == len(parsed), sorted(parsed)


@pytest.mark.parametrize("name", FIGURE_SCRIPTS)
def test_missing_csv_is_one_line_and_exit_2(quick_results, tmp_path, name, capsys):
    """Each script's main() (what `python figures/NAME.py` runs), in this process, on the quick run's results less
    NAME's CSV (and its figures): each other file and folder linked, not copied."""
    results = tmp_path / "results"
    results.mkdir()
    for entry in quick_results.iterdir():
        if entry.name not in ("figures", CSVS[name]):
            (results / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    assert not (results / CSVS[name]).exists() and (quick_results / CSVS[name]).is_file()
    assert importlib.import_module(f"paradyse_lab.figures.{name}").main(["--results", str(results)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and CSVS[name] in lines[0] and "not found" in lines[0]
    assert not (results / "figures" / f"{name}.png").exists()


def test_a_figure_script_runs_as_a_command(tmp_path, monkeypatch, capsys):
    """`python figures/NAME.py` (the scripts' entry point) exits 2 with one line when its CSV is missing: the file
    run as `__main__` by its path (`runpy.run_path`, as the interpreter runs a script: its own `__package__`-less
    branch that puts the checkout on sys.path, then `sys.exit(main())` on sys.argv), in this process: a fresh
    interpreter would add only its start and imports (a second of CPU) to what this checks."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script's sys.path insert stays in this test
    monkeypatch.setattr(sys, "argv", ["table5_ablation.py", "--results", str(tmp_path)])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(ROOT / "figures" / "table5_ablation.py"), run_name="__main__")
    assert done.value.code == 2
    assert sys.path[0] == str(ROOT)  # run by its file path: the checkout's packages first
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "table5.csv" in lines[0] and "not found" in lines[0]


@pytest.fixture(scope="module")
def full_run_figure(quick_results, tmp_path_factory) -> tuple[Path, list, int]:
    """figures/table5_ablation.py drawn as a full run draws it (`draw_figure`: PNG and PDF) into a folder of its
    own, as NAME t5: (the folder, the files `draw_figure` returned, the drawings of a Figure meanwhile)."""
    from matplotlib.figure import Figure

    from paradyse_lab.app.reproduce_figures import draw_figure

    out = tmp_path_factory.mktemp("full_run_figure")
    drawings = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(Figure, "draw", lambda fig, renderer, draw=Figure.draw: drawings.append(fig) or draw(
            fig, renderer))
        written = draw_figure("table5_ablation", quick_results, out, "t5", None)
    return out, written, len(drawings)


def test_a_full_run_saves_png_and_pdf_and_a_quick_one_leaves_no_stale_pdf(quick_results, full_run_figure):
    """`draw_figure` as a full run calls it writes NAME.png and .pdf; the quick run's PNG alone removes the
    PDF, so no figure of another run stays beside it (`quick_run` starts with a full run's
    table5_ablation.pdf in its folder)."""
    from paradyse_lab.app.reproduce_settings import FIGURE_FORMATS

    full, written, _ = full_run_figure
    assert Settings.make(quick=False).figure_formats == FIGURE_FORMATS == ("png", "pdf")
    assert written == ["figures/t5.png", "figures/t5.pdf"]
    assert (full / "t5.pdf").read_bytes().startswith(b"%PDF") and (full / "t5.png").stat().st_size > 1000
    assert sorted(p.name for p in full.iterdir()) == ["t5.pdf", "t5.png"]
    figures = quick_results / "figures"
    assert (figures / "table5_ablation.png").stat().st_size > 1000 and not (figures / "table5_ablation.pdf").exists()


def test_render_draws_each_file_once_as_savefig_lays_it_out(quick_results, full_run_figure):
    """`render` (through `draw_figure`) measures the tight box without a drawing of its own and leaves savefig no
    layout pass to make (the figure's `tight_layout` is its layout): one drawing per file, and the PNG byte for
    byte the one savefig writes after drawing the figure for its layout and measuring the box on it."""
    import io

    import matplotlib.pyplot as plt

    from paradyse_lab.figures import _common

    full, _, drawings = full_run_figure
    module = importlib.import_module("paradyse_lab.figures.table5_ablation")
    args = _common.parse_args(["--results", str(quick_results)], "t5")
    assert drawings == 2  # the PNG's and the PDF's
    fig = module.draw(args)
    fig.draw_without_rendering()
    pad = plt.rcParams["savefig.pad_inches"]
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=150, bbox_inches=fig.get_tightbbox(fig.canvas.get_renderer()).padded(pad))
    plt.close(fig)
    assert (full / "t5.png").read_bytes() == buffer.getvalue()


# --- what the figures draw: every plotted value read back from the Figure and compared with its CSV ---------

@pytest.fixture(scope="module")
def drawn_figure(quick_run):
    """drawn_figure(name, results): the Figure that figures/NAME.py drew from the CSVs under `results` in
    the quick run (saved as its PNG), and paradyse_lab.figures._common."""
    from paradyse_lab.figures import _common

    return lambda name, results: (quick_run[1][name, Path(results)][-1], _common)


def test_the_quick_run_drew_each_figure_once(quick_run):
    out, figures = quick_run
    assert sorted(figures) == sorted([(n, out) for n in FIGURE_SCRIPTS]
                                     + [(n, out / PAPER_DIR) for n in PAPER_FIGURE_SCRIPTS])
    assert all(len(drawings) == 1 for drawings in figures.values()), {k: len(v) for k, v in figures.items()}


def test_each_title_sits_where_matplotlib_would_place_it(quick_run):
    """The figures' titles are given their place (`_common.TITLE_Y`, not placed again at each drawing pass): the
    place matplotlib's automatic placement gives them (matplotlib/axes/_base.py `_update_title_position`), since
    in every figure the quick run drew each title clears the axes and its x axis's tick labels, ticks and label,
    and no axes has a y offset text, a twin or a child axes (what would move a title up)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from paradyse_lab.figures._common import TITLE_Y

    for (name, _), figures in quick_run[1].items():
        figure = figures[-1]
        renderer = FigureCanvasAgg(figure).get_renderer()  # the figure was closed once saved
        for ax in figure.axes:
            if not ax.get_title():
                continue
            assert ax.title.get_position()[1] == TITLE_Y, name
            x_axis = ax.xaxis.get_tightbbox(renderer)
            top = max(ax.get_window_extent(renderer).ymax, x_axis.ymax if x_axis is not None else 0.0)
            assert ax.title.get_window_extent(renderer).ymin >= top, name
            assert not (ax.yaxis.offsetText.get_visible() and ax.yaxis.offsetText.get_text()), name
            assert not ax.child_axes and ax._twinned_axes.get_siblings(ax) == [ax], name


@pytest.mark.parametrize("truth", ["analytic", "paper"])
def test_table5_draws_the_papers_and_our_values_of_every_variant(quick_results, drawn_figure, truth):
    results = quick_results if truth == "analytic" else quick_results / PAPER_DIR
    t = pd.read_csv(results / "table5.csv")
    fig, _ = drawn_figure("table5_ablation", results)
    lengths, savings = fig.axes[:2]
    assert lengths.get_xlabel() == "longest sequence trained (K tokens)"
    assert savings.get_xlabel().startswith("saving of the full system (%)")
    for ax, paper, ours, scale in ((lengths, "paper_max_len", "max_len", 1 / 1024),
                                   (savings, "paper_saving", "saving", 100.0)):
        paper_bars, our_bars = ax.containers
        assert [r.get_width() for r in paper_bars] == pytest.approx(list(scale * t[paper].fillna(0)))
        assert [r.get_width() for r in our_bars] == pytest.approx(list(scale * t[ours].fillna(0)))
        assert [r.get_label() for r in ax.containers] == ["paper (measured)", "ours (simulated)"]
    labels = [tick.get_text() for tick in lengths.get_yticklabels()]
    assert len(labels) == len(t) and labels[0] == "full"
    assert any("METP" in label for label in labels)  # strategy names shown as the paper writes them


def test_fig2_draws_every_run_of_every_panel(quick_results, drawn_figure):
    summary = pd.read_csv(quick_results / "fig2_summary.csv")
    fig, common = drawn_figure("fig2_cumulative_time", quick_results)
    panels = list(dict.fromkeys(zip(summary["dataset"], summary["model"])))
    policies = list(dict.fromkeys(summary["policy"]))
    by_title = {ax.get_title(): ax for ax in fig.axes}
    for dataset, model in panels:
        ax = by_title[f"{common.DATASET_LABELS[dataset]}, {common.MODEL_LABELS[model]}"]
        assert ax.get_xlabel() == "sequence length (K tokens, sorted run)"
        assert ax.get_ylabel() == "cumulative training time (s)"
        lines = {line.get_label(): line for line in ax.get_lines()}
        for policy in policies:
            run = pd.read_csv(quick_results / "runs" / "fig2" / f"{dataset}__{model}__{policy.replace(':', '-')}.csv")
            trained = run[~run["oom"].astype(bool)]
            line = lines[common.POLICY_STYLE[policy]["label"]]
            assert list(line.get_xdata()) == pytest.approx(list(trained["seq_len"] / 1024))
            assert list(line.get_ydata()) == pytest.approx(list(trained["cumulative_time_s"]))
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "ParaDySe (heuristic)" in legend and "OOM (run ends)" in legend


def test_plan_map_colours_each_layer_and_length_by_the_planned_strategy(quick_results, drawn_figure):
    df = pd.read_csv(quick_results / "plan_map.csv")
    fig, common = drawn_figure("plan_map", quick_results)
    names = list(common.STRATEGY_COLORS) + ["OOM"]
    by_title = {ax.get_title(): ax for ax in fig.axes}
    for (model, solver), g in df.groupby(["model", "solver"], sort=False):
        label = "heuristic (ParaDySe)" if solver == "heuristic" else f"{solver} (exact)"
        ax = by_title[f"{common.MODEL_LABELS.get(model, model)}: {label}"]
        grid = g.pivot(index="layer", columns="seq_len", values="strategy")
        expected = [[names.index(s.split("+")[0]) if s.split("+")[0] in names else len(names) - 1 for s in row]
                    for row in grid.to_numpy()]
        assert ax.images[0].get_array().tolist() == expected
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("sequence length (K tokens)", "layer")
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [common.STRATEGY_LABELS[n] for n in common.STRATEGY_COLORS] + ["no plan fits (OOM)"]


def test_memory_breakdown_stacks_the_three_parts_under_the_budget_line(quick_results, drawn_figure):
    df = pd.read_csv(quick_results / "memory_breakdown.csv")
    fig, common = drawn_figure("memory_breakdown", quick_results)
    by_title = {ax.get_title(): ax for ax in fig.axes}
    for (model, strategy), g in df.groupby(["model", "strategy"], sort=False):
        ax = by_title[f"{common.MODEL_LABELS.get(model, model)}, {common.STRATEGY_LABELS.get(strategy, strategy)}"]
        g = g.sort_values("seq_len")
        stacked = g[["model_state_bytes", "kept_bytes", "transient_bytes"]].sum(axis=1) / common.GiB
        top = ax.collections[-1].get_paths()[0].vertices  # the last band's outline: its upper edge is the total
        assert top[:, 1].max() == pytest.approx(stacked.max())
        assert [c.get_label() for c in ax.collections] == ["model states (weights, grads, Adam)",
                                                            "activations kept for backward", "largest transient"]
        budget = [line for line in ax.get_lines() if line.get_label() == "usable memory"][0]
        assert budget.get_ydata()[0] == pytest.approx(g["budget_bytes"].iloc[0] / common.GiB)


def test_solver_quality_draws_the_benchmarks_times_gaps_and_runs(quick_results, drawn_figure):
    from paradyse_lab.results.timings import read_with_timings

    b = read_with_timings(quick_results / "solver_bench.csv")  # the solve times: timings/solver_bench.csv
    q = pd.read_csv(quick_results / "solver_quality_runs.csv")
    fig, _ = drawn_figure("solver_quality", quick_results)
    gaps, times, runs = fig.axes[:3]
    assert (times.get_xlabel(), times.get_ylabel()) == ("decisions L (layers or sub-layers)", "median solve time (ms)")
    drawn = [(list(line.get_xdata()), list(line.get_ydata())) for line in times.get_lines()]
    expected = []
    for _, g in b.groupby(["solver", "kind"], sort=False):
        g = g.groupby("layers", as_index=False)[["max_gap_pct", "median_ms"]].max()
        expected.append((list(g["layers"]), list(g["median_ms"])))
    assert len(drawn) == len(expected)
    for (x, y), (ex, ey) in zip(drawn, expected):
        assert x == ex and y == pytest.approx(ey)
    heights = sorted(r.get_height() for c in runs.containers for r in c)
    assert heights == pytest.approx(sorted(100 * q["gap_to_dp"].fillna(0)))
    assert gaps.get_ylabel() == "worst gap to the optimum (%)"


def test_costmodel_accuracy_scatters_truth_against_prediction_with_each_models_mape(quick_results, drawn_figure):
    pts = pd.read_csv(quick_results / "costmodel_points.csv")
    acc = pd.read_csv(quick_results / "costmodel_accuracy.csv")
    fig, _ = drawn_figure("costmodel_accuracy", quick_results)
    time_interp = fig.axes[0]
    assert time_interp.get_xlabel() == "truth: whole-model step time (s)"
    sub = pts[pts["split"] == "interp"]
    for collection, (name, g) in zip(time_interp.collections, sub.groupby("cost_model", sort=False)):
        mape = acc[(acc["cost_model"] == name) & (acc["split"] == "interp")]["time_mape"].iloc[0]
        assert collection.get_label() == f"{name} (MAPE {100 * mape:.1f}%)"
        expected = g[["time_s", "pred_time_s"]].to_numpy().ravel()
        assert collection.get_offsets().ravel().tolist() == pytest.approx(expected)


@pytest.mark.parametrize("truth", ["analytic", "paper"])
def test_packing_draws_every_runs_time_per_token_and_longest_document(quick_results, drawn_figure, truth):
    """Every bar of figures/packing.py (its gid names its row) is its row of packing.csv, hatched when the run
    stopped at an OOM step."""
    results = quick_results if truth == "analytic" else quick_results / PAPER_DIR
    table = pd.read_csv(results / "packing.csv")
    fig, _ = drawn_figure("packing", results)
    scales = {column: scale for column, _, scale in importlib.import_module("paradyse_lab.figures.packing").METRICS}
    rows = {(r["dataset"], r["model"], int(r["pack_tokens"]), r["policy"]): r for r in table.to_dict("records")}
    assert len(rows) == len(table)  # one row per bar: looked up by its gid below, not filtered per bar
    seen = set()
    for ax in fig.axes:
        for bar in ax.patches:
            if not bar.get_gid():
                continue
            column, d, m, b, p = bar.get_gid().split("|")
            row = rows[d, m, int(b), p]
            expected = 0.0 if pd.isna(row[column]) else row[column] * scales[column]
            assert bar.get_height() == pytest.approx(expected), bar.get_gid()
            assert (bar.get_hatch() or "") == ("" if row["finished"] else "///")
            seen.add((column, d, m, int(b), p))
    expected_bars = {(c, r.dataset, r.model, int(r.pack_tokens), r.policy) for r in table.itertuples() for c in scales}
    assert seen == expected_bars and table.pack_tokens.nunique() == 3
