"""REPORT.md of `paradyse-lab reproduce`: the paper's numbers beside ours, how each was obtained, what differs.

`write_report(results_dir, settings, timings)` writes it (`document`); `paradyse_lab_vs_ours_markdown` is
below. Modules by concern: `markdown` (cells, tables, names, each truth's folder), `headline` (headline
claims, Table 5, Figure 2 panels), `savings` (BERT savings by length, the runs beyond the paper),
`sections` (switching memory, calibration, solvers, cost models), `differences` (sources and what differs).
`paper_vs_ours_markdown(results_dir)` returns the headline and Table 5 tables alone (for the README).
"""

from paradyse_lab.app.report.document import write_report
from paradyse_lab.app.report.headline import paper_vs_ours_markdown

__all__ = ["paper_vs_ours_markdown", "write_report"]
