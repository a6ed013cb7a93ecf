"""The peak of a piece of code's allocations, read from torch's own profiler (allocator events, CPU)."""

import json

from torch.profiler import ProfilerActivity, profile


def peak_above_start(run, tmp_path) -> int:
    """Bytes allocated at the peak of `run()` above what was allocated when it started (profiler events; 0 when
    nothing was allocated). The trace is written under `tmp_path`."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    events = [e["args"] for e in json.loads(trace.read_text())["traceEvents"] if e.get("name") == "[memory]"]
    if not events:  # nothing allocated
        return 0
    start = events[0]["Total Allocated"] - events[0]["Bytes"]
    return max(e["Total Allocated"] for e in events) - start
