"""Every figure of a `reproduce --quick` run says so under it; a full run's figures carry no such line."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from paradyse_lab.app import reproduce_figures  # noqa: E402
from paradyse_lab.app.reproduce_settings import Settings  # noqa: E402


def test_each_quick_figure_is_labelled_quick(tmp_path, monkeypatch):
    labels = {}

    def record(module, results, figures, name, note, formats, label=""):
        labels[name] = label
        return []

    monkeypatch.setattr(reproduce_figures, "draw_figure", record)
    reproduce_figures.step_figures(tmp_path, Settings.make(True), False)
    assert labels and all(label.startswith("QUICK run (reproduce --quick: 20 sequences") for label in labels.values())
    labels.clear()
    reproduce_figures.step_figures(tmp_path, Settings.make(False), False)
    assert labels and set(labels.values()) == {""}


def test_render_writes_the_label_under_the_figure(tmp_path):
    import matplotlib.pyplot as plt

    from paradyse_lab.figures._common import render

    drawn = []

    def draw(_args):
        fig, ax = plt.subplots()
        ax.plot([0, 1], [0, 1])
        drawn.append(fig)
        return fig

    render("x", draw, tmp_path, tmp_path, "x", formats=("png",), label="QUICK run")
    assert [t.get_text() for t in drawn[0].texts] == ["QUICK run"] and (tmp_path / "x.png").is_file()
