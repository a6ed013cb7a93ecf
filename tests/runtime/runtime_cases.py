"""Cases run on every rank of one gloo process group (dist_harness.py); test_distributed.py runs them.

Run: `python -m pytest -q tests/runtime`. The cases live in modules by concept (one sub-layer, the whole model,
Hugging Face models, vocabulary-parallel embedding and head, packed documents, the training loop, checkpoints, the
measuring commands, the operation tracer, and the modules registered at the end); this module gathers their
`CASES` and `ONLY_AT` in one registry, the one the harness runs, and re-exports the shared reference and checks
(reference_checks.py) and the case factories that other cases modules import from here.
"""

from __future__ import annotations

import checkpoint_cases
import grad_reduce_cases
import hf_cases
import measure_cases
import model_cases
import op_trace_cases
import optim_cases
import packed_cases
import resume_identity_cases
import sublayer_cases
import train_cases
import vocab_parallel_cases
import weights_cases
from model_cases import model_case  # noqa: F401 - re-exported for the cases modules below
from packed_cases import PACKS, packed_model_case, packed_sublayer_case  # noqa: F401 - re-exported
from reference_checks import (  # noqa: F401 - re-exported: the cases modules import them from here
    MODEL_LAYERS,
    STRATEGIES,
    TILE,
    TOL,
    B,
    S,
    _check_model,
    check_offloaded,
    check_sharded_attention,
    config,
    feasible,
    grad_of,
    llama_config,
    llama_plans,
    predicted_bytes,
    random_state,
    reference,
    reference_and_model,
    reference_run,
    sublayer_reference,
    vocab_predicted_bytes,
)
from sublayer_cases import sublayer_case  # noqa: F401 - re-exported
from train_cases import (  # noqa: F401 - re-exported
    _assert_same_checkpoints,
    _micro_gpt2_config,
    _micro_llama_config,
    _set_aside,
    _shared_config,
    _shared_tmpdir,
)

CASES = {}
ONLY_AT: dict[str, tuple[int, ...]] = {}
"""World sizes of the cases whose subject does not change with p (each case says why); the others run at
every world size of test_distributed.py."""
for _module in (hf_cases, model_cases, sublayer_cases, vocab_parallel_cases, packed_cases, train_cases,
                checkpoint_cases, measure_cases, op_trace_cases, resume_identity_cases):
    CASES.update(_module.CASES)
    ONLY_AT.update(_module.ONLY_AT)

# --- Hugging Face weights in and out, checkpoints resharded (weights_cases.py) -------------------------------

CASES.update(weights_cases.CASES)
ONLY_AT.update(weights_cases.ONLY_AT)
CASES.update(optim_cases.CASES)
ONLY_AT.update(optim_cases.ONLY_AT)
CASES.update(grad_reduce_cases.CASES)
ONLY_AT.update(grad_reduce_cases.ONLY_AT)


# --- grouped steps: a global batch over groups of ranks, states in one world layout (grouped_cases.py) ------

import grouped_cases  # noqa: E402 - it reads this module's helpers, defined above

CASES.update(grouped_cases.CASES)
ONLY_AT.update(grouped_cases.ONLY_AT)

import planned_groups_cases  # noqa: E402 - grouped steps sized by the group planner

CASES.update(planned_groups_cases.CASES)
ONLY_AT.update(planned_groups_cases.ONLY_AT)

import node_cases  # noqa: E402 - a world of two nodes (calibrate's inter-node link)

CASES.update(node_cases.CASES)
ONLY_AT.update(node_cases.ONLY_AT)

import head_chunk_cases  # noqa: E402 - head-chunked attention (`+headchunk`), reads this module's helpers

CASES.update(head_chunk_cases.CASES)
ONLY_AT.update(head_chunk_cases.ONLY_AT)

import round_cases  # noqa: E402 - a step as rounds of group splits, reduced once

CASES.update(round_cases.CASES)
ONLY_AT.update(round_cases.ONLY_AT)

import ulysses_ring_cases  # noqa: E402 - Ulysses x ring at p = 4, on this module's helpers

CASES.update(ulysses_ring_cases.CASES)
ONLY_AT.update(ulysses_ring_cases.ONLY_AT)

import megatron_cp_cases  # noqa: E402 - tensor x context parallel at p = 4, on this module's helpers

CASES.update(megatron_cp_cases.CASES)
ONLY_AT.update(megatron_cp_cases.ONLY_AT)

import ulysses_uneven_cases  # noqa: E402 - Ulysses with uneven heads at p = 4, on this module's helpers

CASES.update(ulysses_uneven_cases.CASES)
ONLY_AT.update(ulysses_uneven_cases.ONLY_AT)

import subworld_cases  # noqa: E402 - the strategies' subgroups inside groups smaller than the world

CASES.update(subworld_cases.CASES)
ONLY_AT.update(subworld_cases.ONLY_AT)

import flag_cases  # noqa: E402 - one-collective yes-or-no decisions (calibrate's loops)

CASES.update(flag_cases.CASES)
ONLY_AT.update(flag_cases.ONLY_AT)
