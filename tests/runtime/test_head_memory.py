"""The head and loss's working memory, measured by torch's own profiler (allocator events, CPU), against the
cost model's count: the whole head's kept and transient [t, V] buffers (paradyse_lab/costmodel/analytic.py
`fixed`) and the tiled loss's (paradyse_lab/costmodel/head_loss.py), in fp32 (the CPU runtime's dtype). In bf16
the CPU kernels convert the logits to fp32 before the softmax (a copy CUDA's fused kernels do not make), so the
bf16 count is checked on a GPU with CUDA's allocator (tests/gpu/test_runtime_gpu.py, the same `head_case`).

The [t, V] terms dominate by construction (V >> h), so the measured peak above the inputs must equal the cost
model's kept + transient within the few [t, h] and [V, h] buffers the head also makes (gradients of x and W)."""

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
    start = events[0]["Total Allocated"] - events[0]["Bytes"]
    return max(e["Total Allocated"] for e in events) - start


@pytest.mark.parametrize("head", ["whole", "tiled"])
def test_head_peak_is_the_cost_models_kept_plus_transient(head, tmp_path):
    step, lower, upper = head_case("fp32", head)
    measured = _peak_above_start(step, tmp_path)
    assert lower <= measured <= upper, (measured, lower, upper)
