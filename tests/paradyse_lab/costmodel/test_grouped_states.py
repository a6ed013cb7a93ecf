"""The state bytes of a grouped step (paradyse_lab/costmodel/grouped_states.py), by hand for gpt2-tiny (h 96,
4 layers, 512 tokens of vocabulary, 1024 positions, fp32) on W = 4; the runtime's bytes are checked against the
same functions in tests/runtime/grouped_cases.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from paradyse_lab.core.model_spec import PRESETS
from paradyse_lab.costmodel.grouped_states import (
    data_parallel_width,
    grouped_state_kept_bytes,
    grouped_state_sent_bytes,
    replicated_total,
    sharded_total,
)

TINY = replace(PRESETS["gpt2-tiny"], dtype="fp32")
SHARDED = 4 * ((96 * 288 + 96 * 96 + 288) + (2 * 96 * 384 + 384))
"""Per layer: attention W_qkv [96, 288] with its bias and W_proj [96, 96]; MLP W_in, W_out [96, 384], b_in."""


def test_parameter_counts():
    assert sharded_total(TINY) == SHARDED
    h, v, pos = 96, TINY.vocab_size, TINY.max_positions
    assert replicated_total(TINY) == 8 * 3 * h + (v + pos) * h + 2 * h  # norms + output biases; wte, wpe, lnf


@pytest.mark.parametrize("sizes, d", [((1, 1, 1, 1), 4), ((2, 2), 2), ((2, 1, 1), 4), ((4,), 1)])
def test_sent_bytes_use_the_smallest_groups_data_parallel_width(sizes, d):
    flat = SHARDED // 4 * 4  # one rank's world shard, fp32 bytes
    want = {} if d == 1 else {"all_gather": (d - 1) * flat, "reduce_scatter": (d - 1) * flat,
                              "all_reduce": 2 * replicated_total(TINY) * 4 * (d - 1) // d + 8 * (d - 1) // d}
    assert grouped_state_sent_bytes(TINY, 4, sizes) == want


def test_kept_bytes_one_group_of_the_world_aliases_its_shards():
    whole = grouped_state_kept_bytes(TINY, 4, 4, (4,))
    assert whole["group_weights"] == whole["send_buffer"] == whole["gather_buffer"] == 0
    assert whole["group_grads"] == SHARDED // 4 * 4
    pairs = grouped_state_kept_bytes(TINY, 4, 2, (2, 2))
    assert pairs["group_weights"] == pairs["group_grads"] == SHARDED // 2 * 4
    assert pairs["gather_buffer"] == 2 * pairs["send_buffer"] == 2 * SHARDED // 4 * 4


def test_blocks_that_are_not_whole_heads_gather_over_the_world():
    """2 K/V heads on 4 ranks: a step with groups of 2 gathers contiguous shards from all 4 ranks (d = 4, not
    2); groups of 1 or 4 need no whole heads."""
    gqa = replace(TINY, kv_heads=2)
    assert data_parallel_width(4, (2, 2), gqa) == 4 and data_parallel_width(4, (2, 2), TINY) == 2
    assert data_parallel_width(4, (4,), gqa) == 1 and data_parallel_width(4, (1, 1, 1, 1), gqa) == 4
    assert grouped_state_sent_bytes(gqa, 4, (2, 2))["all_gather"] == 3 * sharded_total(gqa) // 4 * 4
