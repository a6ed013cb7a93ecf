"""Per-case times of the distributed tests (test_distributed.py) in pytest's report.

A distributed case runs inside its world's spawned ranks, all cases of a world in one go; the pytest item only
reads its outcome. So the call phase of such an item reports the case's own time in the ranks (the slowest
rank's; `case_seconds`, set by the test) instead of the microseconds it took to read it, and the run ends
with one line per world size: process-group start-up, the cases' total, the world's wall time and its ranks'
CPU seconds (user + system, all ranks together).
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    seconds = getattr(item, "case_seconds", None)
    if report.when == "call" and seconds is not None:
        report.duration = seconds
        report.user_properties.append(("case_seconds_in_ranks", seconds))


def pytest_terminal_summary(terminalreporter):
    import sys

    module = sys.modules.get("test_distributed")
    worlds = getattr(module, "WORLDS", {})
    if not worlds:
        return
    from dist_harness import START

    terminalreporter.section("distributed worlds (gloo, CPU)")
    for p, w in sorted(worlds.items()):
        cases = {k: v for k, v in w.seconds.items() if k != START}
        slowest = max(cases, key=cases.get, default="-")
        terminalreporter.write_line(
            f"p = {p}: {len(cases)} cases, start-up {w.seconds.get(START, 0.0):.1f} s, "
            f"cases {sum(cases.values()):.1f} s, wall {w.wall_s:.1f} s, ranks' CPU {w.cpu_s:.1f} s; "
            f"slowest case {slowest} ({cases.get(slowest, 0.0):.1f} s)")
