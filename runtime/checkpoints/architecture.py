"""A checkpoint's record of its model (meta.json's `architecture`): the `ModelSpec` fields the runtime builds
from, under the keys and in the order every checkpoint has written them, so checkpoints written before and after
stay readable and comparable (a resumed run must keep its architecture).

The record holds the layer's shapes and kinds only; what the vocabulary adds for costing (name, training dtype,
source) is not part of a checkpoint. The norms' epsilon is recorded as `eps`.
"""

from __future__ import annotations

from paradyse_lab.core.model_spec import ModelSpec

RECORD_KEYS = ("vocab_size", "max_positions", "hidden", "heads", "layers", "ffn_hidden", "causal", "eps",
               "kv_heads", "norm", "ffn_kind", "bias", "qkv_bias", "rope_theta", "tied", "rope_llama3")
"""meta.json's `architecture` keys, in their written order."""
REQUIRED_KEYS = ("vocab_size", "max_positions", "hidden", "heads", "layers")
"""Keys every record holds; the others take the `ModelSpec` defaults when missing."""
SPEC_FIELD = {"eps": "norm_eps"}
"""Record keys whose `ModelSpec` field has another name."""


def architecture_record(spec: ModelSpec) -> dict:
    """The record of `spec` (JSON-ready but for `rope_llama3`, a tuple or None)."""
    return {key: getattr(spec, SPEC_FIELD.get(key, key)) for key in RECORD_KEYS}


def spec_of_record(record: dict, name: str = "checkpoint") -> ModelSpec:
    """The `ModelSpec` a record describes (its keys checked by the caller: `RECORD_KEYS`, `REQUIRED_KEYS`)."""
    fields = {SPEC_FIELD.get(key, key): value for key, value in record.items()}
    if fields.get("rope_llama3") is not None:
        fields["rope_llama3"] = tuple(fields["rope_llama3"])
    return ModelSpec(name=name, **fields)
