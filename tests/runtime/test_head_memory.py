"""The head and loss's working memory, measured by torch's own profiler (allocator events, CPU), against the
cost model's count: the whole head's kept and transient [t, V] buffers (paradyse_lab/costmodel/analytic.py
`fixed`), the tiled loss's (paradyse_lab/costmodel/head_loss.py) and one rank's vocabulary-parallel loss's
(paradyse_lab/costmodel/vocab_parallel.py), in fp32 and bf16; tests/gpu checks bf16
with CUDA's allocator (the same `head_case`).
"""

import json

import pytest
from head_memory_cases import head_case
from torch.profiler import ProfilerActivity, profile


def _peak_above_start(run, tmp_path) -> int:
    """Bytes allocated at the peak of `run()` above what was allocated when it started (profiler events)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    events = [e["args"] for e in json.loads(trace.read_text())["traceEvents"] if e.get("name") == "[memory]"]
    if not events:  # nothing allocated
        return 0
    start = events[0]["Total Allocated"] - events[0]["Bytes"]
    return max(e["Total Allocated"] for e in events) - start


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("head", ["whole", "tiled", "vocab"])
def test_head_peak_is_the_cost_models_kept_plus_transient(head, dtype, tmp_path):
    step, lower, upper = head_case(dtype, head)
    measured = _peak_above_start(step, tmp_path)
    assert lower <= measured <= upper, (measured, lower, upper)
