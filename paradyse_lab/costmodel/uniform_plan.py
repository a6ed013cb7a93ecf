"""Whole-model numbers of a uniform plan (one option on every layer): what `paradyse-lab cost` prints.

Peak memory = model states + every layer's kept activations + the largest transient + embedding/head
(docs/design.md section 3): the backward of the last layer runs while all layers' activations are alive.
"""

from __future__ import annotations

from dataclasses import dataclass

from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel import formulas as F
from paradyse_lab.costmodel.types import CostModel


@dataclass(frozen=True)
class UniformPlanCost:
    """One strategy option on all L layers of the model, per rank."""

    option: str
    """`NAME` or `NAME+recompute`."""
    time_s_per_layer: float
    """Attention + MLP, forward + backward."""
    total_time_s: float
    """All layers plus embedding/head."""
    kept_bytes_per_layer: int
    """Activations one block keeps."""
    transient_bytes: int
    """Largest working set of any sub-layer (or of the loss)."""
    model_state_bytes: int
    """Weights, gradients, Adam states of the whole model on this rank."""
    peak_bytes: int
    """Model states + L x kept + embedding/head kept + largest transient."""
    memory_bytes: int
    """Device memory of the GPU."""
    comm_bytes_per_layer: dict
    """Bytes one block sends per collective kind."""
    host_bytes_per_layer: int = 0
    """Activations one block moves to host memory (`+offload`); kept_bytes_per_layer is what stays."""

    @property
    def fits(self) -> bool:
        """Peak within device memory."""
        return self.peak_bytes <= self.memory_bytes


def uniform_plan_cost(cm: CostModel, option: StrategyOption, seq_len: int, batch: int = 1) -> UniformPlanCost:
    """Cost of `option` on every layer of `cm.model` at (seq_len, batch)."""
    att = cm.sublayer("attention", option, seq_len, batch)
    mlp = cm.sublayer("mlp", option, seq_len, batch)
    fixed = cm.fixed(seq_len, batch)
    L = cm.model.layers
    states = L * (att.model_state_bytes + mlp.model_state_bytes) + fixed.model_state_bytes
    kept = att.kept_bytes + mlp.kept_bytes
    transient = max(att.transient_bytes, mlp.transient_bytes, fixed.transient_bytes,
                    F.optimizer_temporary_bytes(cm.model, cm.cluster.on_cpu))  # the optimizer step's
    comm: dict[str, int] = {}
    for part in (att, mlp):
        for op, n in part.comm_bytes().items():
            comm[op] = comm.get(op, 0) + n
    return UniformPlanCost(
        option=option.name,
        time_s_per_layer=att.time_s + mlp.time_s,
        total_time_s=L * (att.time_s + mlp.time_s) + fixed.time_s,
        kept_bytes_per_layer=kept,
        transient_bytes=transient,
        model_state_bytes=states,
        peak_bytes=states + L * kept + fixed.kept_bytes + transient,
        memory_bytes=cm.cluster.memory_bytes,
        comm_bytes_per_layer=dict(sorted(comm.items())),
        host_bytes_per_layer=att.host_bytes + mlp.host_bytes,
    )
