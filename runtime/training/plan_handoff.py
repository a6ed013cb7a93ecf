"""How the planner's choices reach every rank and the model (library module of the training loop).

- `decide_plan_on_rank0`: rank 0's policy decides each step's `paradyse_lab.core.plan.Plan`, every rank runs it;
- `vocab_storage`: where the run stores its embedding and head, decided once on rank 0 for the whole run;
- `replicated_head_policy`: a policy planning only the heads a replicated embedding and head run;
- `loss_tile`: the tokens per tile of the loss that the step's planned head runs.
"""

from __future__ import annotations

from paradyse_lab.core.plan import Plan
from paradyse_lab.core.policy_contract import HeadPolicy
from paradyse_lab.costmodel.head_loss import loss_tile_tokens, vocab_tile_tokens
from paradyse_lab.runtime.comm import collectives as comm


def decide_plan_on_rank0(decide, group=None):
    """`decide()` (the policy's choice for this step) run on rank 0 of `group` only, and its result sent to
    every rank: all ranks then run the same plan whatever the solver does. A solver need not be
    deterministic across processes (CP-SAT with several workers and a time limit can return different
    optimal or near-optimal plans), and ranks running different strategies post different collectives,
    which hangs NCCL or returns garbage. Other ranks never call `decide`."""
    decision = decide() if comm.rank(group) == 0 else None
    decision = comm.broadcast_object(decision, 0, group)  # pickled StepPlan, rank 0 -> all
    if not isinstance(getattr(decision, "plan", None), Plan):  # names would leave the model to guess the granularity
        raise TypeError(f"a policy's decision must carry a paradyse_lab.core.plan.Plan, got {decision!r}")
    return decision


def replicated_head_policy(policy):
    """`policy` planning only the heads a replicated embedding and head run (grouped runs store them so)."""
    if isinstance(policy, HeadPolicy):
        policy.restrict_heads(("whole", "tiled"))
    return policy


def loss_tile(decision, model, tokens: int) -> int:
    """Tokens per tile of the tiled loss when the planner chose it for this step (the cost model
    sizes the tiles), else 0 (the whole head); a vocabulary-parallel model's tiles of its `tokens` (this rank's) as
    the cost model sizes them."""
    if getattr(model, "vocab_parallel", False):
        return vocab_tile_tokens(model.cfg.model_spec("fp32" if model.wte.element_size() == 4 else "bf16"), model.p,
                                 tokens)
    if getattr(decision, "head", "whole") == "vocab":
        raise RuntimeError("the plan takes the vocabulary-parallel head but this model keeps the embedding and head "
                           "replicated (the policy's heads were not restricted to the run's storage)")
    if getattr(decision, "head", "whole") != "tiled":
        return 0
    return loss_tile_tokens(model.cfg.vocab_size, model.wte.element_size(), tokens)


def vocab_storage(policy, longest: int, batch: int, group) -> bool:
    """Whether the run stores the embedding and head by vocabulary rows: when the
    planner takes the head option 'vocab' at the run's longest step (rank 0 asks, every rank follows). The storage
    holds for the whole run, so the policy then plans every step with the heads it can run: 'vocab' alone, or the
    replicated 'whole' and 'tiled'. A policy without head options (`static:NAME`) keeps the replicated head, and so
    does one process (its one shard is the whole table: 'vocab' would only be the tiled loss)."""
    if not isinstance(policy, HeadPolicy):
        return False
    head = policy.storage_head(longest, batch) if comm.rank(group) == 0 and comm.size(group) > 1 else None
    head = head if isinstance(head, str) else None  # a stand-in policy's answer is not a head option
    vocab = comm.broadcast_object(head, 0, group) == "vocab"
    policy.restrict_heads(("vocab",) if vocab else ("whole", "tiled"))
    return vocab
