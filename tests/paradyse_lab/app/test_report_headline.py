"""REPORT's headline: the length extension names the baseline it divides by and the strongest one beside it."""

from __future__ import annotations

import pandas as pd

from paradyse_lab.app.report.headline import _our_value

REACH = {"static:megatron_ts": 40_960, "static:megatron_cz": 98_304, "static:ulysses_z": 0, "static:metp": 122_880}


def _results(tmp_path):
    summary = [{"dataset": "grch38", "model": "gpt", "policy": p, "max_seq_len_trained": n, "total_time_s": 1.0}
               for p, n in {**REACH, "dynamic:heuristic": 163_840}.items()]
    pd.DataFrame(summary).to_csv(tmp_path / "fig2_summary.csv", index=False)
    headline = [{"dataset": "grch38", "model": "gpt", "policy": "dynamic:heuristic", "max_time_reduction": 0.1,
                 "against": "static:metp", "length_extension": 163_840 / 122_880 - 1,
                 "max_length_extension": 163_840 / 40_960 - 1, "paper_time_reduction": None,
                 "paper_length_extension": 1.8122}]
    pd.DataFrame(headline).to_csv(tmp_path / "fig2_headline.csv", index=False)
    return tmp_path


def test_the_length_headline_names_the_shortest_reaching_baseline_and_the_strongest(tmp_path):
    text = _our_value(_results(tmp_path), "grch38", "gpt", "length", "dynamic:heuristic")
    # "up to" against MegatronTS (the first to stop; Ulysses-Z trained nothing and is no baseline of a ratio),
    # the strongest (METP) beside it, each with the lengths the ratio divides
    assert text == ("300.00% vs MegatronTS (163,840 / 40,960); vs the strongest, METP: 33.33% "
                    "(163,840 / 122,880)")
