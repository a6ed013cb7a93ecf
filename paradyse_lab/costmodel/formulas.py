"""Pure cost formulas: parameters, FLOPs, memory and collective time. Units are in the names.

Sources:
- Model states: ZeRO (Rajbhandari et al., SC 2020, section 3.1): mixed-precision Adam holds 2 bytes of
  fp16/bf16 weights, 2 of fp16/bf16 gradients and K = 12 of fp32 master weights, momentum and variance per
  parameter: 16 bytes. Pure fp32 training keeps no master copy: 4 + 4 + 4 + 4 = 16 as well.
- Activations: Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"
  (MLSys 2023), section 4: per layer sbh(34 + 5as/h) bytes with 16-bit activations, and 34sbh/t with tensor
  and sequence parallelism (their eq. 5 without the as^2 term). FlashAttention keeps no s^2 softmax and
  no attention-dropout mask; with dropout 0 the two sbh output-dropout masks vanish: 32sbh/t. The
  per-tensor list is in `kept_elements_*` below.
- FLOPs: 2mnk per GEMM; attention 4 s^2 h per sequence forward, halved when causal, backward 2.5x the
  forward (FlashAttention convention, docs/hardware.md section 2 [FA2][FA3]); GEMM backward 2x forward.
- Collective time: alpha-beta in the nccl-tests convention, t = alpha(op, n) + f(op, n) S / busbw(S),
  f = 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter, all_to_all, broadcast, 1 for p2p
  (docs/hardware.md section 6 [PERF]); alpha = base + per-step x steps from NCCL's tuning model [TUNE]. Over
  GPUs of several nodes: an intra-node phase over NVLink plus an inter-node phase over the NICs
  (`hierarchical_time_s`, docs/hardware.md section 4).
"""

from __future__ import annotations

from paradyse_lab.cluster.spec import ClusterSpec
from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.costmodel.types import CollectiveCall

MIXED_PRECISION_ADAM_BYTES_PER_PARAM = {
    "weights_16bit": 2, "grads_16bit": 2, "master_weights_fp32": 4, "adam_m_fp32": 4, "adam_v_fp32": 4,
}
"""ZeRO section 3.1: 2 + 2 + K with K = 12."""
FP32_ADAM_BYTES_PER_PARAM = {"weights_fp32": 4, "grads_fp32": 4, "adam_m_fp32": 4, "adam_v_fp32": 4}
LSE_BYTES = 4
"""FlashAttention keeps its log-sum-exp in fp32, one per (head, query)."""
FLASH_BWD_OVER_FWD = 2.5
GEMM_BWD_OVER_FWD = 2.0
GRAD_REDUCE_BYTES = 4
"""Bytes per element of every parameter gradient summed over ranks: fp32 whatever the model dtype, as Megatron-LM's
`grad_reduce_in_fp32` and PyTorch FSDP2's `MixedPrecisionPolicy(reduce_dtype=torch.float32)` reduce them
(`GRAD_REDUCE_DTYPE` names both sources): a 16-bit gradient is copied into an fp32
buffer just before its reduce-scatter, all-reduce or point-to-point reduction (its bytes sent are the fp32
buffer's), and the sum is rounded once to the model dtype, one bucket of at most `GRAD_BUCKET_ELEMENTS` at a
time where the gradient is large (a ZeRO-3 sub-layer's, the embedding's) or as it is where it is a point-to-point
partial (METP) or already an fp32 sum (the tiled MLP's). In fp32 training nothing changes."""
GRAD_BUCKET_ELEMENTS = 40_000_000
"""Elements per fp32 bucket of a gradient reduction (`all_reduce_grads`,
`reduce_scatter_grads` read it from here): Megatron-LM's default bucket size (max(40000000, 1000000 * dp_size)
parameters, `DistributedDataParallelConfig.bucket_size`), so that the fp32 copy of a large gradient (a vocabulary
embedding) exists one bucket at a time."""


def grad_copy_bytes(model: ModelSpec) -> int:
    """Bytes per element of the fp32 copy a gradient is reduced in beside its own: `GRAD_REDUCE_BYTES` for a 16-bit
    model, 0 for fp32 (reduced as it is, no copy)."""
    return GRAD_REDUCE_BYTES if model.dtype_bytes < GRAD_REDUCE_BYTES else 0


def grad_all_reduces(elements: int, p: int, bucket: int = GRAD_BUCKET_ELEMENTS) -> list[CollectiveCall]:
    """The fp32 all-reduces of `elements` replicated gradient elements over p ranks, cut into buckets of at most
    `bucket` elements (`all_reduce_grads`): the full buckets, then the remainder."""
    full, rest = divmod(elements, bucket)
    return [CollectiveCall("all_reduce", n * GRAD_REDUCE_BYTES, p, k)
            for n, k in ((bucket, full), (rest, 1 if rest else 0)) if k]


def reduce_scatter_bucket_bytes(model: ModelSpec, shard_elements: int, p: int) -> int:
    """Transient bytes of the fp32 reduce-scatter of a rank-major [p, shard_elements] 16-bit gradient
    (`reduce_scatter_grads`): one fp32 bucket of [p, c] columns and its [c] output,
    c = min(shard_elements, GRAD_BUCKET_ELEMENTS // p); nothing for fp32 (reduced as it is) or on one rank."""
    if p == 1 or not grad_copy_bytes(model):
        return 0
    cols = min(shard_elements, max(1, GRAD_BUCKET_ELEMENTS // p))
    return (p + 1) * cols * GRAD_REDUCE_BYTES


def grad_bucket_copy_bytes(model: ModelSpec, elements: int) -> int:
    """Transient bytes of `all_reduce_grads` over `elements` gradient elements: one fp32 bucket for a 16-bit model,
    nothing for fp32 (summed in place)."""
    return min(elements, GRAD_BUCKET_ELEMENTS) * grad_copy_bytes(model)


def model_state_bytes_per_param(model: ModelSpec) -> int:
    """Bytes of weights, gradients and Adam states per parameter (16 either way, named above)."""
    table = FP32_ADAM_BYTES_PER_PARAM if model.dtype == "fp32" else MIXED_PRECISION_ADAM_BYTES_PER_PARAM
    return sum(table.values())


def optimizer_temporary_bytes(model: ModelSpec, on_cpu: bool) -> int:
    """Working memory of the optimizer step beyond the model states. CUDA runs AdamW fused (one kernel per
    parameter group, no temporaries). On the CPU PyTorch's AdamW runs its single-tensor loop (no fused or
    multi-tensor kernel there), which for each parameter makes `exp_avg_sq.sqrt()` and its quotient by the bias
    correction (`denom`) before the in-place update, while the previous parameter's `denom` is still bound: two
    tensors of one parameter's size and one of the one before it alive at once (torch/optim/adam.py
    `_single_tensor_adam`). Bounded here by twice the largest unsharded trained tensor plus the next largest
    (the embedding, learned positions or untied head [rows, h], and every layer's weights)."""
    if not on_cpu:
        return 0
    h, d = model.hidden, model.hidden // model.heads
    ffn_rows = 2 * model.ffn_hidden if model.ffn_kind == "swiglu" else model.ffn_hidden
    rows = [h + 2 * model.kv_heads * d, h, ffn_rows, model.ffn_hidden] * model.layers
    if model.embedding_and_head:
        rows += [model.vocab_size, model.max_positions] + ([] if model.tied else [model.vocab_size])
    largest, second = sorted(rows, reverse=True)[:2] if len(rows) > 1 else (rows[0], 0)
    return (2 * largest + second) * h * model.dtype_bytes


def norm_params(model: ModelSpec) -> int:
    """LayerNorm weight + bias (2h) or RMSNorm weight (h)."""
    return (2 if model.norm == "layernorm" else 1) * model.hidden


def attention_sharded_params(model: ModelSpec) -> int:
    """W_qkv [h, h + 2kv] (+ its bias) and W_proj [h, h]: stored as 1/p shards (docs/paper.md section 3)."""
    h, kv = model.hidden, model.kv_hidden
    return h * (h + 2 * kv) + h * h + ((h + 2 * kv) if model.bias or model.qkv_bias else 0)


def mlp_sharded_params(model: ModelSpec) -> int:
    """W_in [h, f] and W_out [f, h] (SwiGLU: gate, up, down) with the input biases: 1/p shards."""
    h, f = model.hidden, model.ffn_hidden
    if model.ffn_kind == "swiglu":
        return 3 * h * f + (2 * f if model.bias else 0)
    return 2 * h * f + (f if model.bias else 0)


def replicated_params(model: ModelSpec) -> int:
    """Per sub-layer: its norm and its output bias (length h), which act on full hidden vectors under
    every strategy and so are replicated; their gradients are all-reduced."""
    return norm_params(model) + (model.hidden if model.bias else 0)


def sharded_params(model: ModelSpec, kind: str) -> int:
    """Sharded parameters of an 'attention' or 'mlp' sub-layer."""
    return attention_sharded_params(model) if kind == "attention" else mlp_sharded_params(model)


def embedding_params(model: ModelSpec) -> int:
    """Token embedding, the head (its own matrix unless tied), learned positions and the final norm
    (replicated in the runtime)."""
    if not model.embedding_and_head:
        return 0
    head = 0 if model.tied else model.vocab_size
    return (model.vocab_size + head + model.max_positions) * model.hidden + norm_params(model)


def sublayer_model_state_bytes(model: ModelSpec, kind: str, p: int) -> int:
    """Per rank: the 1/p shard of the sub-layer's matrices plus its replicated vectors, 16 B/param."""
    per = model_state_bytes_per_param(model)
    return per * (-(-sharded_params(model, kind) // p) + replicated_params(model))


def kept_elements_attention(model: ModelSpec, tokens: int) -> int:
    """Elements an attention sub-layer keeps for backward without recomputation (FlashAttention, no
    dropout): norm input h, norm output h, Q h, K kv, V kv, attention output h, per token.

    Korthikanti section 4.1: attention block 11sbh + 5as^2b bytes plus its LayerNorm input 2sbh. Dropping
    the s^2 terms (FlashAttention) and the sbh output-dropout mask leaves 12sbh bytes = 6h elements of
    2 bytes per token, which is this count with kv = h.
    """
    h = model.hidden
    return tokens * (4 * h + 2 * model.kv_hidden)


def kept_elements_mlp(model: ModelSpec, tokens: int) -> int:
    """Elements an MLP keeps without recomputation: norm input, norm output, the f-wide activation input
    and output (SwiGLU: gate, up and their product), per token.

    Korthikanti section 4.1: MLP 19sbh bytes plus LayerNorm input 2sbh; with dropout 0 the sbh mask
    vanishes: 20sbh bytes = 2h + 2f elements with f = 4h.
    """
    f_tensors = 3 if model.ffn_kind == "swiglu" else 2
    return tokens * (2 * model.hidden + f_tensors * model.ffn_hidden)


def lse_bytes(model: ModelSpec, tokens: int) -> int:
    """FlashAttention's fp32 log-sum-exp: one per head and query token."""
    return LSE_BYTES * model.heads * tokens


def linear_flops_forward(model: ModelSpec, kind: str, tokens: int) -> float:
    """2mnk over the sub-layer's GEMMs for `tokens` tokens."""
    return 2.0 * tokens * (sharded_params(model, kind) - _bias_params(model, kind))


def _bias_params(model: ModelSpec, kind: str) -> int:
    if kind == "attention" and (model.bias or model.qkv_bias):
        return model.hidden + 2 * model.kv_hidden
    if not model.bias:
        return 0
    return (2 if model.ffn_kind == "swiglu" else 1) * model.ffn_hidden


def attention_core_flops_forward(model: ModelSpec, seq_len: int, batch: int) -> float:
    """QK^T and PV: 4 s^2 h per sequence, halved when causal ([FA2] convention)."""
    full = 4.0 * batch * seq_len * seq_len * model.hidden
    return full / 2 if model.causal else full


def elementwise_bytes_forward(model: ModelSpec, kind: str, tokens: int) -> float:
    """HBM traffic of the memory-bound ops: norm (read + write h), residual add (2 reads + write h), and
    for the MLP the activation (read + write f; SwiGLU reads two f-wide inputs)."""
    e = model.dtype_bytes
    traffic = 5 * model.hidden
    if kind == "mlp":
        traffic += (3 if model.ffn_kind == "swiglu" else 2) * model.ffn_hidden
    return float(tokens * traffic * e)


BUSBW_FACTOR = {
    "all_gather": lambda n: (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n, "broadcast": lambda n: (n - 1) / n,
    "all_reduce": lambda n: 2 * (n - 1) / n, "p2p": lambda n: 1.0,
}
"""nccl-tests [PERF]: busbw = algbw * f; broadcast is charged like all_gather (a pipelined ring)."""
ALPHA_STEPS = {
    "all_gather": lambda n: n - 1, "reduce_scatter": lambda n: n - 1, "all_to_all": lambda n: n - 1,
    "broadcast": lambda n: n - 1, "all_reduce": lambda n: 2 * (n - 1), "p2p": lambda n: 1,
}
"""Ring steps of one call: NCCL's tuning model charges a per-step latency for each [TUNE]."""


def collective_time_s(cluster: ClusterSpec, op: str, buffer_bytes: float, ranks: int,
                      ranks_per_node: int | None = None) -> float:
    """Alpha-beta time of one collective over `ranks` GPUs (docs/hardware.md section 6); hierarchical
    (`hierarchical_time_s`) when they span nodes. `ranks_per_node`: how many of them share a node (default: an
    aligned block of consecutive ranks, min(ranks, the node's GPUs))."""
    if ranks <= 1 or buffer_bytes <= 0:
        return 0.0
    per_node = min(ranks, ranks_per_node or cluster.node_gpus)
    if per_node < ranks:
        return hierarchical_time_s(cluster, op, buffer_bytes, per_node, -(-ranks // per_node))
    alpha = cluster.alpha_s(op, ALPHA_STEPS[op](ranks))
    return alpha + BUSBW_FACTOR[op](ranks) * buffer_bytes / cluster.busbw(op, buffer_bytes)


def collective_call_s(cluster: ClusterSpec, op: str, buffer_bytes: float, ranks: int,
                      ranks_per_node: int | None = None) -> float:
    """One collective call as a training step pays it: its alpha-beta time (`collective_time_s`) and the
    cluster's `collective_sync_s`, what a call costs beyond that when the ranks reach it from compute, apart
    (measured by `paradyse-lab calibrate`; 0 on the presets)."""
    if ranks <= 1:
        return 0.0
    return collective_time_s(cluster, op, buffer_bytes, ranks, ranks_per_node) + cluster.collective_sync_s


def inter_node_time_s(cluster: ClusterSpec, op: str, buffer_bytes: float, nodes: int) -> float:
    """One rank per node, each over its own NIC (rail-aligned rings; docs/hardware.md section 4): the alpha-beta
    line with NCCL's per-network-step latency and the NIC's bandwidth as the busbw."""
    if nodes <= 1 or buffer_bytes <= 0:
        return 0.0
    alpha = cluster.inter_node_alpha_s * ALPHA_STEPS[op](nodes)
    return alpha + BUSBW_FACTOR[op](nodes) * buffer_bytes / cluster.inter_node_bytes_per_s


def hierarchical_time_s(cluster: ClusterSpec, op: str, buffer_bytes: float, per_node: int, nodes: int) -> float:
    """A collective over `nodes` x `per_node` GPUs as two phases (docs/hardware.md section 4): inside each node
    over NVLink on the whole buffer, then between nodes on the 1/per_node share each GPU holds, every GPU over
    its own NIC in parallel. reduce_scatter: intra-node reduce-scatter, then inter-node reduce-scatter of the
    shard; all_gather and broadcast the mirror; all_reduce = intra reduce-scatter + inter all-reduce + intra
    all-gather, priced as an intra all-reduce plus the inter all-reduce of the shard. all_to_all: of each
    rank's buffer, the (nodes - 1) / nodes share bound for other nodes leaves over its NIC while the rest moves
    over NVLink at the same time (the slower of the two). p2p (a ring step): a ring over several nodes steps at
    the pace of its network hops."""
    if op == "p2p":
        return cluster.inter_node_alpha_s + buffer_bytes / cluster.inter_node_bytes_per_s
    if op == "all_to_all":
        ranks = per_node * nodes
        off_node = buffer_bytes * (ranks - per_node) / ranks
        on_node = buffer_bytes * (per_node - 1) / ranks
        alpha = cluster.alpha_s(op, per_node - 1) + cluster.inter_node_alpha_s * (nodes - 1)
        return alpha + max(off_node / cluster.inter_node_bytes_per_s,
                           on_node / cluster.busbw(op, buffer_bytes) if per_node > 1 else 0.0)
    intra = collective_time_s(cluster, op, buffer_bytes, per_node)
    return intra + inter_node_time_s(cluster, op, buffer_bytes / per_node, nodes)


def ring_overlap_s(compute_s: float, comm_s: float, steps: int) -> float:
    """Wall time of a double-buffered ring of `steps` exchanges overlapped with `steps + 1` equal blocks
    of compute: each step costs max(block compute, block exchange), and the last block runs alone."""
    if steps <= 0:
        return compute_s + comm_s
    block = compute_s / (steps + 1)
    return steps * max(block, comm_s / steps) + block
