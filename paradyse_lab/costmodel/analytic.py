"""The analytic cost model: a strategy's schedule (`schedules`) priced on a `ClusterSpec`.

compute = FLOPs / (peak x efficiency(shape)) + element-wise bytes / HBM bandwidth; communication =
alpha-beta per collective (`formulas`); ring point-to-point overlapped with the compute it hides
(formulas.ring_overlap_s); memory from the tensors each strategy keeps (`strategy_work`); activation offload's
copies over the host link overlapped with each phase's compute (`techniques`).

When the cluster carries a calibration (`ClusterSpec.calibration`, fitted by `fit_calibration`), each
calibrated strategy's time is re-weighted from these parts (`StrategyCalibration.time_s`) and the model
calls itself `calibrated`; memory is never calibrated.

On a measured cluster whose `step_counts` were counted for this model at this p (`paradyse-lab calibrate`),
what the runtime does besides GEMMs, attention kernels and collectives is
priced from those counts instead of the schedule's element-wise formula: launches x `runtime_launch_s` + counted
bytes / `hbm_bytes_per_s`, per sub-layer, for the embedding and head (`fixed`), and for what a training step runs
after its backward (`FixedCost.optimizer_s`: gradient norm, AdamW, finite check, a launch at `launch_s`, or
the epilogue's time where `calibrate` timed it, `epilogue_s`, plus their latency-bound calls, `step_calls_s`);
a ring hides only `comm_overlap` of its point-to-point time (formulas `ring_overlap_s` blended with running one
after the other); and every collective call costs
`collective_sync_s` on top of its alpha-beta time (the ranks reach it from compute).
"""

from __future__ import annotations

from paradyse_lab.cluster.spec import ClusterSpec
from paradyse_lab.core.layer_graph import SUBLAYER_KINDS
from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.core.strategies import StrategyOption, get_strategy
from paradyse_lab.costmodel import formulas as F
from paradyse_lab.costmodel.analytic_store import shared_costs
from paradyse_lab.costmodel.head_loss import whole_head_bytes
from paradyse_lab.costmodel.schedules import schedule
from paradyse_lab.costmodel.techniques import forward_share, offload_exposed_s
from paradyse_lab.costmodel.types import CollectiveCall, FixedCost, SubLayerCost
from paradyse_lab.errors import UserInputError, require_positive_int

PLAN_PICKLE_BYTES = 1024
"""About the pickled size of one step's plan decision (a `StepDecision` of a few layers); latency-bound either way."""


class AnalyticCostModel:
    """Analytic costs of `model` on `cluster` (its GPU count unless `p` is given)."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, p: int | None = None):
        self.model = model
        self.cluster = cluster
        self.name = "calibrated" if cluster.calibration else "analytic"
        self.label = f"calibrated ({cluster.name}: {cluster.source})" if cluster.calibration else "analytic"
        self.p = require_positive_int("p", p if p is not None else cluster.gpus)
        # the costs every analytic model of this model, cluster and p has computed in this process (`shared_costs`)
        self._cache, self._calls = shared_costs(model, cluster, self.p)

    def budget_bytes(self, budget: int) -> int:
        """The memory a plan may use: all of `budget` (`CostModel` protocol)."""
        return int(budget)

    def check(self, option: StrategyOption, seq_len: int, batch: int = 1, kind: str | None = None) -> None:
        """Raise `UserInputError` if the option cannot run these shapes (`kind`: one sub-layer; None: both)."""
        require_positive_int("seq_len", seq_len)
        require_positive_int("batch", batch)
        get_strategy(option.strategy).check(self.model, self.p, seq_len, kind)
        if option.offload and not (self.cluster.host_link_bytes_per_s and self.cluster.host_memory_bytes):
            raise UserInputError(f"{option.name}: cluster {self.cluster.name} gives no host_link_gbps and "
                                 "host_memory_gib to offload activations to")

    def feasible(self, option: StrategyOption, seq_len: int, kind: str | None = None) -> bool:
        """Whether the shapes split for this option (no error raised; `kind`: one sub-layer, None: both)."""
        try:
            self.check(option, seq_len, 1, kind)
        except UserInputError:
            return False
        return True

    def counted_s(self, key: str, tokens: int) -> float | None:
        """Seconds of the launches and memory-bound bytes counted under `key` (module docstring) at `tokens`
        tokens, or None when the cluster holds no counts for this model at this p. A sub-layer's or the
        embedding / head's launch costs `runtime_launch_s` when measured (the runtime's Python between its
        operators), the optimizer's `launch_s`; the optimizer's bytes stream the model states, at
        `state_bytes_per_s` when measured."""
        c = self.cluster
        counts = c.step_counts.get(key)
        if counts is None or c.counted_model != self.model.name or c.gpus != self.p:
            return None
        launches, bytes_fixed, bytes_per_token = counts
        optimizer = key == "optimizer"
        bandwidth = c.state_bytes_per_s if optimizer and c.state_bytes_per_s else c.hbm_bytes_per_s
        launch_s = c.runtime_launch_s if c.runtime_launch_s and not optimizer else c.launch_s
        return launches * launch_s + max(0.0, bytes_fixed + bytes_per_token * tokens) / bandwidth

    def step_calls_s(self) -> float:
        """Seconds of the latency-bound calls of a training step that no sub-layer or head schedule lists:
        the plan's broadcast from rank 0
        (broadcast_object_list: its
        length, then its pickled bytes, `PLAN_PICKLE_BYTES`) and the all-reduces of one fp32 number of the
        gradient norm and of the finite-weights check. Charged with the optimizer step, on measured clusters only
        (with the counted epilogue)."""
        calls = (CollectiveCall("broadcast", 8, self.p), CollectiveCall("broadcast", PLAN_PICKLE_BYTES, self.p),
                 CollectiveCall("all_reduce", 4, self.p, count=2))
        return sum(self.collective_s(call) for call in calls)

    def collective_s(self, call: CollectiveCall) -> float:
        """Seconds for all `count` calls of one `CollectiveCall`, each with the cluster's `collective_sync_s` (the
        ranks reach a collective from compute; 0 but on measured clusters). Kept per call: most calls recur at
        every length (weight gathers, gradient reductions) and across the options that share them."""
        seconds = self._calls.get(call)
        if seconds is None:
            per_node = max(1, self.cluster.node_gpus // call.stride) if call.stride > 1 else None  # a strided group
            seconds = call.count * F.collective_call_s(self.cluster, call.op, call.buffer_bytes, call.ranks, per_node)
            self._calls[call] = seconds
        return seconds

    def sublayer(self, kind: str, option: StrategyOption, seq_len: int, batch: int = 1,
                 segments: tuple[int, ...] | None = None) -> SubLayerCost:
        """Cost of one sub-layer ('attention' or 'mlp') under `option`, per rank, one training step.

        `segments`: the documents of a packed step of seq_len tokens."""
        key = (kind, option, seq_len, batch, segments)
        if key in self._cache:
            return self._cache[key]
        if kind not in SUBLAYER_KINDS:
            raise UserInputError(f"unknown sub-layer kind {kind!r}; valid: {', '.join(SUBLAYER_KINDS)}")
        self.check(option, seq_len, batch, kind)
        c = self.cluster
        sch = schedule(self.model, kind, option, seq_len, batch, self.p, segments)
        gemm_s = sch.gemm_flops / (c.peak_flops * c.gemm_eff(sch.gemm_min_dim))
        attn_s = sum(flops / (c.peak_flops * c.attention_eff(keys, sch.attention_kernel_causal))
                     for flops, keys in sch.attention_calls)
        counted = self.counted_s(f"{option.name}.{kind}", batch * seq_len)
        memory_bound = sch.elementwise_bytes / c.hbm_bytes_per_s if counted is None else counted
        compute_s = gemm_s + attn_s + memory_bound
        exposed = sum(self.collective_s(x) for x in sch.collectives if not x.overlapped)
        ring = sum(self.collective_s(x) for x in sch.collectives if x.overlapped)
        hidden = compute_s if sch.ring_hides_all_compute else attn_s
        if sch.ring_steps:
            f = c.comm_overlap
            ring_s = f * F.ring_overlap_s(hidden, ring, sch.ring_steps) + (1 - f) * (hidden + ring)
            time_s = compute_s - hidden + ring_s + exposed
        else:
            time_s = compute_s + ring + exposed
        states = F.sublayer_model_state_bytes(self.model, kind, self.p)
        calibration = self.cluster.calibration.get(option.strategy)
        if calibration is not None:
            exposed_s = time_s - compute_s
            time_s = calibration.time_s(compute_s, exposed_s, self.model.hidden)
            compute_s *= calibration.compute_scale
        if sch.host_bytes:  # offload: each way over the host link, overlapped with its phase
            share = forward_share(option.recompute or (option.tiled and kind == "mlp"))
            time_s += offload_exposed_s(time_s, sch.host_bytes / c.host_link_bytes_per_s, share,
                                        sch.host_prefetched)
        cost = SubLayerCost(
            time_s=time_s, compute_s=compute_s, exposed_comm_s=time_s - compute_s,
            kept_bytes=sch.kept_bytes, transient_bytes=sch.transient_bytes, model_state_bytes=states,
            collectives=sch.collectives, host_bytes=sch.host_bytes,
        )
        self._cache[key] = cost
        return cost

    def fixed(self, seq_len: int, batch: int = 1) -> FixedCost:
        """Embedding, final norm, tied head and loss on the rank's t tokens (replicated weights)."""
        m, c = self.model, self.cluster
        optimizer_s = self.counted_s("optimizer", batch * seq_len)
        if optimizer_s is not None and c.epilogue_s:  # timed on the measured cluster: the same work every step
            optimizer_s = c.epilogue_s
        optimizer_s = 0.0 if optimizer_s is None else optimizer_s + self.step_calls_s()
        if not m.embedding_and_head:
            return FixedCost(0.0, 0, 0, 0, optimizer_s)
        require_positive_int("seq_len", seq_len)
        t = batch * seq_len // self.p
        e, h, v = m.dtype_bytes, m.hidden, m.vocab_size
        params = F.embedding_params(m)
        head_flops = 3 * 2.0 * t * h * v
        time_s = head_flops / (c.peak_flops * c.gemm_eff(min(t, h)))
        counted = self.counted_s("fixed", batch * seq_len)
        traffic_s = 3 * t * (4 * h * e + 2 * v * 4) / c.hbm_bytes_per_s  # lookup, norm, softmax traffic
        time_s += traffic_s if counted is None else counted
        time_s += sum(self.collective_s(call) for call in F.grad_all_reduces(params, self.p))  # fp32 buckets
        reduce_bytes = F.grad_bucket_copy_bytes(m, params) if self.p > 1 else 0  # after the head's backward
        return FixedCost(
            time_s=time_s,
            model_state_bytes=F.model_state_bytes_per_param(m) * params,
            kept_bytes=whole_head_bytes(m, t)[0],  # embedding out, final norm in/out, logits, log-sum-exp
            transient_bytes=max(whole_head_bytes(m, t)[1], reduce_bytes),  # the logits' gradient, one fp32 chunk
            optimizer_s=optimizer_s,
        )
