"""The head and loss's working memory, measured by torch's own profiler (allocator events, CPU), against the
cost model's count: the whole head's kept and transient [t, V] buffers (paradyse_lab/costmodel/analytic.py
`fixed`), the tiled loss's (paradyse_lab/costmodel/head_loss.py) and one rank's vocabulary-parallel loss's
(paradyse_lab/costmodel/head_loss.py), in fp32 and bf16; tests/gpu checks bf16
with CUDA's allocator (the same `head_case`).
"""

import pytest
from head_memory_cases import head_case
from profiler_peak import peak_above_start


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("head", ["whole", "tiled", "vocab"])
def test_head_peak_is_the_cost_models_kept_plus_transient(head, dtype, tmp_path):
    step, lower, upper = head_case(dtype, head)
    measured = peak_above_start(step, tmp_path)
    assert lower <= measured <= upper, (measured, lower, upper)
