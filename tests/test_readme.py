"""Numbers the README and the results pages quote, against the output of the commands they name (so they cannot
drift), and the README's headline table against the pages that detail it."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from paradyse_lab.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
RESULTS = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
RUNTIME = (ROOT / "docs" / "runtime.md").read_text(encoding="utf-8")


def _block_after(marker: str, text: str = RESULTS) -> list[str]:
    """The lines of the first fenced block that opens after `marker` in `text`."""
    start = text.index(marker) + len(marker)
    opening = text.index("```", start)
    body = text.index("\n", opening) + 1
    return text[body:text.index("```", body)].rstrip("\n").splitlines()


def _table_after(marker: str, text: str = RESULTS) -> list[list[str]]:
    """The cells of the first markdown table after `marker` in `text`, header first (the --- row dropped)."""
    lines = text[text.index(marker):].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not all(set(c) <= {"-"} for c in cells):
            rows.append(cells)
    return rows


def test_cost_example_is_the_commands_output(capsys):
    marker = "`paradyse-lab cost --model gpt --seq 4K` (per GPU, analytic model, a100-80gb-x8):"
    assert main(["cost", "--model", "gpt", "--seq", "4K"]) == 0
    assert capsys.readouterr().out.rstrip("\n").splitlines() == _block_after(marker)


def test_cost_model_table_is_the_commands_output():
    """The analytic row of `costmodel ablate` on the bundled synthetic profile (its MAPE columns,
    from the function the command prints them from, without the command's leave-one-shape-out and regret)."""
    from paradyse_lab.cluster.files import get_cluster
    from paradyse_lab.cluster.presets import DEFAULT_CLUSTER
    from paradyse_lab.costmodel.ablation import accuracy
    from paradyse_lab.costmodel.profiles import read_profiles

    path = "paradyse_lab/data/profiles/analytic_a100-80gb-x8.csv"
    table = {row[0]: row[1:5] for row in _table_after(f"`paradyse-lab costmodel ablate --profiles {path}`")[1:]}
    models, _ = accuracy(read_profiles(ROOT / path), ("analytic",), get_cluster(DEFAULT_CLUSTER))
    ours = [f"{100 * models['analytic'][k]:.2f}%" for k in ("time_mape_interp", "time_mape_extrap",
                                                            "mem_mape_interp", "mem_mape_extrap")]
    assert table["analytic"] == ours


def test_train_log_sample_has_the_logs_columns(tmp_path):
    """docs/runtime.md's `train --log-file` sample: the header the log has, and one value per column a row."""
    sample = _block_after("--no-progress --log-file llama.csv\n```\n", RUNTIME)  # the block after the command's
    config = tmp_path / "micro.json"
    config.write_text(json.dumps({"model_type": "gpt2", "n_embd": 16, "n_head": 2, "n_layer": 2,
                                  "n_positions": 64, "vocab_size": 96}))
    log = tmp_path / "log.csv"
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a micro model: tiny matmuls only lose to thread hand-offs
    try:
        code = main(["train", "--model", str(config), "--dataset", "uniform:8:16", "--policy", "static:megatron_ts",
                     "--steps", "1", "--max-len", "16", "--no-progress", "--log-file", str(log)])
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    header = log.read_text().splitlines()[0]
    assert sample[0] == header
    width = len(header.split(","))
    for row in sample[1:]:
        if row != "...":
            assert len(next(csv.reader([row]))) == width, row  # empty fields (eval_loss) count


def test_band_shares_are_the_samples():
    """The results page's table of the sampled workloads' band shares (what `reproduce` samples) against the lengths."""
    from paradyse_lab.app.report.seeds import band_share_rows
    from paradyse_lab.app.reproduce_settings import Settings

    header, rows = band_share_rows(Settings.make(quick=False))
    table = _table_after("| band | GitHubCode, ours (seed 0)")
    assert table == [header] + rows


@pytest.mark.parametrize("size", [200])
def test_workload_example_is_the_commands_output(size, capsys):
    marker = f"`paradyse-lab data workload github_code --size {size}`"
    assert main(["data", "workload", "github_code", "--size", str(size)]) == 0
    assert capsys.readouterr().out.rstrip("\n").splitlines() == _block_after(marker)


def test_groups_section_names_every_group_policy_and_the_ones_train_takes():
    """The results page's `--groups` list names every group policy `simulate` takes, and its sentence on `train`
    names exactly the ones `train` takes (a renamed or added policy, or one `train` gains, makes the page stale)."""
    from paradyse_lab.core.step_groups import GROUP_POLICIES, ROUND_GROUP_POLICIES, TRAIN_GROUP_POLICIES

    start = RESULTS.index("### Beyond the paper: global batches over groups")
    section = RESULTS[start:RESULTS.index("\n### ", start + 1)]
    listed = section[section.index("`--groups`:"):section.index("`train --global-batch --groups`")]
    assert set(re.findall(r"`([a-z]+(?:-[a-z]+)*)`", listed)) == set(GROUP_POLICIES + ROUND_GROUP_POLICIES)
    train = section[section.index("`train --global-batch --groups`"):section.index("is\nsimulated only")]
    assert re.findall(r"`([a-z-]+)`", train.split("(", 1)[1]) == list(TRAIN_GROUP_POLICIES)


def test_headline_numbers_are_the_detailed_pages():
    """Each number of the README's headline table, as the results and runtime pages print it (there, the tables
    above are checked against their commands or made by `reproduce`), so the front door cannot drift from them."""
    rows = _table_after("<!-- headline -->", README)
    assert rows[0][:2] == ["result", "ours"] and len(rows) > 5
    pages = RESULTS + RUNTIME
    for row in rows[1:]:
        for number in re.findall(r"-?[\d,]+(?:\.\d+)?(?:%|x| ms)?", row[1]):
            assert number in pages, (row[0], number)


def test_every_link_of_the_readme_and_the_docs_finds_its_file():
    """Every relative link and image of README.md, docs/*.md and measurements/README.md names a file or folder
    that exists (pages and records moved between folders: a stale link fails here)."""
    pages = [ROOT / "README.md", ROOT / "measurements" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" not in target and not (page.parent / target).exists():
                missing.append(f"{page.relative_to(ROOT)}: {target}")
    assert missing == []
