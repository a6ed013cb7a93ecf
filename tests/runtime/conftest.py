"""Per-case times of the distributed tests (test_distributed.py) in pytest's report.

A distributed case runs inside its world's spawned ranks, all cases of a world in one go; the pytest item only
reads its outcome. So the call phase of such an item reports the case's own time in the ranks (the slowest
rank's; `case_seconds`, set by the test) instead of the microseconds it took to read it, and the run ends
with one line per world size: the cases, the process-group start-up's and the cases' CPU seconds (all ranks
together, user + system: the load-robust cost), the world's wall time and its ranks' CPU seconds, then the
costliest cases by their ranks' CPU seconds (every case with -v). The numbers travel in the reports' user
properties, so the table is printed under pytest-xdist too (by the controller, which runs no world itself).
"""

from __future__ import annotations

import pytest

WORLD_CASES: dict[int, dict[str, float]] = {}
"""World size -> case -> its ranks' CPU seconds, from the call reports this session received."""
WORLD_TOTALS: dict[int, tuple[float, float, float]] = {}
"""World size -> (start-up CPU seconds of all ranks, wall seconds, all ranks' CPU seconds)."""
COSTLIEST = 15


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    seconds = getattr(item, "case_seconds", None)
    if report.when == "call" and seconds is not None:
        report.duration = seconds
        report.user_properties.append(("case_seconds_in_ranks", seconds))
        report.user_properties.append(("distributed_case_cpu", getattr(item, "case_cpu", None)))


def pytest_runtest_logreport(report):
    for key, value in report.user_properties:
        if key == "distributed_case_cpu" and value is not None:
            p, case, cpu, start_cpu, wall, world_cpu = value
            WORLD_CASES.setdefault(p, {})[case] = cpu
            WORLD_TOTALS[p] = (start_cpu, wall, world_cpu)


def pytest_terminal_summary(terminalreporter):
    if not WORLD_CASES:
        return
    terminalreporter.section("distributed worlds (gloo, CPU)")
    for p, cases in sorted(WORLD_CASES.items()):
        start_cpu, wall, world_cpu = WORLD_TOTALS[p]
        terminalreporter.write_line(
            f"p = {p}: {len(cases)} cases, start-up {start_cpu:.1f} CPU s, cases {sum(cases.values()):.1f} CPU s; "
            f"wall {wall:.1f} s, ranks' CPU {world_cpu:.1f} s")
    ranked = sorted(((cpu, f"{p}-{case}") for p, cases in WORLD_CASES.items() for case, cpu in cases.items()),
                    reverse=True)
    shown = ranked if terminalreporter.verbosity > 0 else ranked[:COSTLIEST]  # -v: every case
    terminalreporter.write_line(f"{'every case' if len(shown) == len(ranked) else 'costliest cases'} (ranks' CPU s): "
                                + ", ".join(f"{name} {cpu:.1f}" for cpu, name in shown))
