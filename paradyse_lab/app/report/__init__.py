"""REPORT.md of `paradyse-lab reproduce`: the paper's numbers beside ours, how each was obtained, what differs.

`write_report(results_dir, settings, timings)` writes it (document.py); `paradyse_lab_vs_ours_markdown` is
below. Modules by concern: markdown.py (cells, tables, names, each truth's folder), headline.py (headline
claims, Table 5, Figure 2 panels), savings.py (BERT savings by length, the runs beyond the paper),
sections.py (switching memory, calibration, solvers, cost models), differences.py (sources and what differs).
`paper_vs_ours_markdown(results_dir)` returns the headline and Table 5 tables alone (for the README).
"""

from paradyse_lab.app.report.document import write_report
from paradyse_lab.app.report.headline import paper_vs_ours_markdown

__all__ = ["paper_vs_ours_markdown", "write_report"]
