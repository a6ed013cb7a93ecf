"""`ParallelGPT`: a GPT-2- or LLaMA-shaped model over p ranks with a per-layer strategy plan, on the unified
layout.

Library module (no command; the runtime package's docstring shows its use). Each rank holds its zig-zag share of the
sequence ([b, s/p] token ids, `layout`) and one 1/p shard of every layer's matrices (`weight_shards`); the
embedding, positions, final norm and head (tied or not) are replicated, their gradients all-reduced in one call
during the backward, or with `vocab_parallel` the embedding and head are each rank's ceil(V/p) vocabulary rows
(Megatron-LM's vocabulary-parallel embedding and cross-entropy, tiled). The model's
shape is its `ModelSpec` (`reference`): LayerNorm or RMSNorm, GELU or
SwiGLU, biases or none, learned or rotary positions (each rank's tokens rotated by their true positions,
`Ctx.positions`), grouped-query attention (the strategies' rule on kv_heads is the
strategy catalog's). `forward(input_ids_local, plan, labels=None)` runs each layer, or each sub-layer,
with the strategy option the `Plan` (options from the strategy catalog
and the granularity) gives it; a hand-written list of names (`NAME` or
`NAME+recompute`, L of them or 2L: attention then MLP of each layer) is read by `Plan.for_layers`. The plan may
change on every call and a switch moves no bytes, because every strategy reads and writes the same layout.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator, Mapping, Sequence
from types import ModuleType

import torch
import torch.nn.functional as F

from paradyse_lab.core.model_spec import ModelSpec, spec_from_hf
from paradyse_lab.core.plan import Plan
from paradyse_lab.core.strategies import CATALOG, USABLE, StrategyOption, get_strategy
from paradyse_lab.costmodel.layer_checkpoint import checkpoints_layer
from paradyse_lab.costmodel.techniques import mlp_tile_positions
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime.comm import autograd as comm_autograd
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm import record as comm_record
from paradyse_lab.runtime.hf.convert import hf_to_state_dict
from paradyse_lab.runtime.hf.weights import read_config, read_rank_state_dict
from paradyse_lab.runtime.model.layout import check_length, gathered_positions, local_positions
from paradyse_lab.runtime.model.packed import check_cu_seqlens, pack_positions
from paradyse_lab.runtime.model.reference import GPTParams, norm
from paradyse_lab.runtime.model.sublayer import make_ctx, run_sublayer
from paradyse_lab.runtime.model.tiled_loss import tiled_head_loss, whole_head_loss
from paradyse_lab.runtime.model.vocab_parallel import (
    vocab_parallel_embedding,
    vocab_parallel_logits,
    vocab_parallel_loss,
)
from paradyse_lab.runtime.model.weight_shards import (
    PARAM_NAMES,
    gather_state_dict,
    init_rank_state_dict,
    shard_state_dict,
)
from paradyse_lab.runtime.strategies.head_chunked import HEAD_CHUNKED_ATTENTION
from paradyse_lab.runtime.strategies.layer_checkpoint import run_checkpointed_layer
from paradyse_lab.runtime.strategies.offload import Offloader
from paradyse_lab.runtime.strategies.tiled_mlp import run_tiled_mlp


class StrategyModules(Mapping):
    """The runtime implementation of each usable catalog strategy (its module, with that sub-layer's `ATTENTION`,
    `MLP` and `TILED_MLP`), read from the catalog when asked: each entry names its module
    (`Strategy.runtime_module`), imported on first use, so a strategy is registered by its catalog entry alone."""

    def __getitem__(self, name: str) -> ModuleType:
        entry = CATALOG.get(name)
        if entry is None or not entry.usable:
            raise KeyError(name)
        module = importlib.import_module(entry.runtime_module)
        return module.for_degree(entry.head_degree) if entry.head_degree else module

    def __iter__(self) -> Iterator[str]:
        return iter(USABLE)

    def __len__(self) -> int:
        return len(USABLE)


STRATEGY_MODULES = StrategyModules()
"""Strategy name -> its runtime module, for every usable entry of the catalog (a two-dimensional entry's: its
module's implementation at the entry's head degree). Iterating lists the one-dimensional strategies (`USABLE`),
which run at every p; a two-dimensional one runs where its head degree divides p, and is asked by name."""


def as_plan(plan: Plan | Sequence[str], layers: int) -> Plan:
    """`plan` itself (the training loop's, typed by the policy), or a hand-written list of names read by
    `Plan.for_layers` (one per layer, or one per sub-layer); every option must have a runtime module."""
    if not isinstance(plan, Plan):
        plan = Plan.for_layers(plan, layers)
    for opt in plan.options:
        if opt.strategy not in STRATEGY_MODULES:
            raise UserInputError(f"strategy {opt.strategy!r} has no runtime implementation; "
                                 f"valid: {', '.join(STRATEGY_MODULES)}")
    return plan


def run_option(opt: StrategyOption, ctx, x: torch.Tensor, weights, mlp_tile: int) -> torch.Tensor:
    """One sub-layer (`ctx.kind`) under `opt`: its strategy, recomputed or not, an MLP tiled over `mlp_tile`
    positions with `+tiled`, an attention over chunks of heads with `+headchunk`
    (x [b, t, h] -> [b, t, h]); `+offload` is the caller's."""
    module = STRATEGY_MODULES[opt.strategy]
    if ctx.kind == "mlp" and opt.tiled:
        return run_tiled_mlp(module.TILED_MLP, ctx, mlp_tile, x, weights)
    if ctx.kind == "attention" and opt.headchunk:
        return run_sublayer(HEAD_CHUNKED_ATTENTION[opt.strategy], ctx, opt.recompute, x, weights)
    impl = module.ATTENTION if ctx.kind == "attention" else module.MLP
    return run_sublayer(impl, ctx, opt.recompute, x, weights)


def checkpointed_layer(opt: StrategyOption, ctxs, x: torch.Tensor, weights, mlp_tile: int) -> torch.Tensor:
    """One whole layer (attention then MLP, `ctxs` and `weights` of each) under a block option that recomputes and
    offloads: only the layer's input is kept (the caller offloads it), its
    attention under `opt`'s strategy (head-chunked with `+headchunk`), its MLP recomputed or, with `+tiled`, tiled
    over `mlp_tile` positions. x [b, t, h] -> [b, t, h]."""
    module = STRATEGY_MODULES[opt.strategy]
    attn = HEAD_CHUNKED_ATTENTION[opt.strategy] if opt.headchunk else module.ATTENTION
    mlp = module.TILED_MLP if opt.tiled else module.MLP
    return run_checkpointed_layer(attn, mlp, ctxs, mlp_tile, x, *weights)


class ParallelGPT(GPTParams):
    """GPT-2 whose layers run under per-layer strategies over `group` (None: the default group)."""

    def __init__(self, cfg: ModelSpec, group=None, seed: int = 0, state_dict: dict | None = None,
                 hf_folder: str | None = None, vocab_parallel: bool = False,
                 rank_state_dict: dict | None = None):
        """Shards of `state_dict` (full, runtime names; `reference`), of the safetensors of the Hugging Face
        model folder `hf_folder` (each rank reads only its slices), or of the GPT-2
        initialisation drawn from `seed` (the same on every rank); or `rank_state_dict`, this rank's tensors
        at the group's size (its shards and the replicated tensors), used as they are, without a copy (a
        group's view of the world layout in a grouped step). `vocab_parallel`: the
        embedding
        and head are sharded by vocabulary rows instead of replicated."""
        self.p, self.rank = comm.size(group), comm.rank(group)
        with torch.device("meta" if hf_folder is None else "cpu"):  # meta: shapes only, the shards are assigned
            super().__init__(cfg, self.p, vocab_parallel)
        self.group, self.vocab_parallel = group, vocab_parallel
        for name, value in (("hidden", cfg.hidden), ("ffn_hidden", cfg.ffn_hidden),
                            ("kv_heads * head_dim", cfg.kv_hidden)):
            if value % self.p:
                raise UserInputError(f"{name} ({value}) must be divisible by p ({self.p}) for the 1/p weight shard")
        if hf_folder is not None:
            self.load_state_dict(read_rank_state_dict(hf_folder, cfg, self.rank, self.p, self.state_dict(),
                                                      vocab_parallel))
            return
        if rank_state_dict is not None:  # dtype and device kept (bf16 on GPU)
            self.load_state_dict(rank_state_dict, assign=True)
            return
        if state_dict is not None:
            local = shard_state_dict(state_dict, self.rank, self.p, vocab_parallel)
        else:  # one sub-layer at a time: the rank never holds the whole model (weight_shards.init_rank_state_dict)
            local = init_rank_state_dict(cfg, seed, self.rank, self.p, vocab_parallel)
        dtypes = {k: v.dtype for k, v in self.state_dict().items()}  # the meta parameters' (fp32)
        self.load_state_dict({k: v.to(dtypes.get(k, v.dtype)) for k, v in local.items()}, assign=True)

    @classmethod
    def from_hf_state_dict(cls, config, state_dict, group=None, vocab_parallel: bool = False) -> ParallelGPT:
        """From a Hugging Face config (dict or `PretrainedConfig`) and state dict: GPT-2 (`GPT2LMHeadModel`),
        or LLaMA-shaped (`LlamaForCausalLM`, `MistralForCausalLM` and `Qwen2ForCausalLM` without a sliding
        window)."""
        cfg = spec_from_hf(config)
        return cls(cfg, group, state_dict=hf_to_state_dict(state_dict, cfg), vocab_parallel=vocab_parallel)

    @classmethod
    def from_hf_folder(cls, folder, group=None, vocab_parallel: bool = False) -> ParallelGPT:
        """From a Hugging Face model folder (config.json and safetensors, one file or shards with their index):
        GPT-2, LLaMA, Mistral or Qwen2; each rank reads only its slices."""
        return cls(spec_from_hf(read_config(folder)), group, hf_folder=str(folder), vocab_parallel=vocab_parallel)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The full (unsharded) state dict; a collective: every rank must call it."""
        return gather_state_dict(self.state_dict(), self.group, self.cfg.vocab_size if self.vocab_parallel else 0)

    def check(self, seq_len: int, plan: Plan | Sequence[str], longest: int | None = None
              ) -> list[tuple[StrategyOption, StrategyOption]]:
        """Raise `UserInputError` unless the plan can run a sequence of `seq_len` tokens whose longest
        document has `longest` tokens (None: one document); returns the (attention, MLP) options of every
        layer."""
        check_length(seq_len, self.p)
        longest = seq_len if longest is None else longest
        if self.cfg.max_positions and longest > self.cfg.max_positions:
            what = "sequence length" if longest == seq_len else "longest packed document"
            raise UserInputError(f"{what} {longest} exceeds max_positions ({self.cfg.max_positions})")
        options = as_plan(plan, self.cfg.layers).layer_options(self.cfg.layers)
        spec = self.cfg.with_dtype("fp32")
        for opt, kind in dict.fromkeys((o, k) for pair in options for o, k in zip(pair, ("attention", "mlp"))):
            get_strategy(opt.strategy).check(spec, self.p, seq_len, kind)  # an MLP has no heads to split
        return options

    def forward(self, input_ids: torch.Tensor, plan: Plan | Sequence[str], labels: torch.Tensor | None = None,
                cu_seqlens=None, loss_tile: int = 0, mlp_tile: int = 0):
        """input_ids [b, s/p] (this rank's tokens, `shard_sequence` order) -> logits [b, s/p, V]; with
        `labels` [b, s/p] (per-position targets, already shifted, -100 ignored) also the mean loss over
        all ranks' tokens (the same value on every rank; call backward on it on every rank).
        `cu_seqlens` [n + 1] (the same on every rank): the sequence is a pack of documents at these offsets
        (`pack_sequence`): positions restart at each document and attention stays inside
        each, under every strategy. `loss_tile` > 0 (with `labels`): the tiled loss, final
        norm, head and loss over `loss_tile` tokens at a time, the logits never whole; returns (None, loss).
        A vocabulary-parallel model (`vocab_parallel`) always returns (None, loss) with `labels`, its embedding and
        loss run `loss_tile` tokens per rank at a time (0: all at once); without labels it returns the logits.
        Options with `+tiled` run their MLPs `mlp_tile` positions at a time (0: ALST's
        rule,
        `techniques.mlp_tile_positions`); with `+offload` what their sub-layers keep waits in host memory
        (the bytes each moved: `self.offload_stats`, of the last forward); a block
        plan's layer under `+recompute+offload` is checkpointed whole (`checkpointed_layer`): its input alone
        waits in host memory, tagged `layers.{i}`."""
        cfg, p = self.cfg, self.p
        b, t = input_ids.shape
        doc_ids = longest = None
        if cu_seqlens is not None:
            cu_seqlens = check_cu_seqlens(cu_seqlens, t * p)
            longest = int((cu_seqlens[1:] - cu_seqlens[:-1]).max())
        options = self.check(t * p, plan, longest)
        x, (wpe, lnf_w, lnf_b, head_w) = self._embed(input_ids, loss_tile)
        if cu_seqlens is None:
            pos = local_positions(t * p, p, self.rank)  # true positions of this rank's tokens: [t]
            all_pos = gathered_positions(t * p, p)  # of every rank's, rank-major: [s]
        else:  # positions within each document, restarting at every document of the pack
            doc_ids, pos, all_pos = pack_positions(cu_seqlens, t * p, p, self.rank)  # [t], [t], [s] rank-major
            doc_ids = doc_ids.to(input_ids.device)  # cu_seqlens stays on the host: kernels read its ints, no sync
        pos, all_pos = pos.to(input_ids.device), all_pos.to(input_ids.device)
        if not cfg.rope:  # learned positions; rotary ones are applied to q and k in every attention
            x = x + F.embedding(pos, wpe)  # [b, t] -> [b, t, h]
        offloader = Offloader(input_ids.device) if any(o.offload for pair in options for o in pair) else None
        self.offload_stats = offloader.stats if offloader else None
        mlp_tile = mlp_tile or mlp_tile_positions(cfg.hidden, t)
        block_plan = as_plan(plan, cfg.layers).granularity == "block"
        for index, (block, (attn_opt, mlp_opt)) in enumerate(zip(self.layers, options)):
            ctxs, weights = [], []
            for kind, params in (("attention", block.attn), ("mlp", block.mlp)):
                ctxs.append(make_ctx(cfg, self.group, kind, t * p, f"layers.{index}.{kind}", input_ids.device, pos,
                                     all_pos, doc_ids, cu_seqlens))
                weights.append([getattr(params, n) for n in PARAM_NAMES])
            if block_plan and checkpoints_layer(attn_opt, ("attention", "mlp")):  # the layer's input alone offloaded
                with offloader.sublayer(f"layers.{index}", weights[0] + weights[1]):
                    x = checkpointed_layer(attn_opt, ctxs, x, weights, mlp_tile)
                continue
            for ctx, w, opt in zip(ctxs, weights, (attn_opt, mlp_opt)):
                with offloader.sublayer(ctx.tag, w) if opt.offload else contextlib.nullcontext():
                    x = run_option(opt, ctx, x, w, mlp_tile)
        if self.vocab_parallel:
            if labels is None:
                return vocab_parallel_logits(norm(x, lnf_w, lnf_b, cfg.norm_eps), head_w, self.group,
                                             cfg.vocab_size)  # [b, t, h] -> [b, t, V]
            logits = None
            total = vocab_parallel_loss(x, lnf_w, lnf_b, head_w, labels, cfg.norm_eps, loss_tile, self.group,
                                        cfg.vocab_size)
        elif labels is None:
            return norm(x, lnf_w, lnf_b, cfg.norm_eps) @ head_w.t()  # [b, t, h] -> [b, t, V]
        elif loss_tile > 0:
            logits, total = None, tiled_head_loss(x, lnf_w, lnf_b, head_w, labels, cfg.norm_eps, loss_tile)
        else:  # a caller that trains drops the logits at once (`model(...)[1]`): the cost model counts no [t, V]
            total, logits = whole_head_loss(x, lnf_w, lnf_b, head_w, labels, cfg.norm_eps, keep_logits=True)
        with comm_record.tagged("loss"):
            loss = comm_autograd.replicated_mean(total, (labels != -100).sum(), self.group)  # [], [] in one [2] sum
        return logits, loss

    def _embed(self, input_ids: torch.Tensor, loss_tile: int):
        """(token embeddings [b, t, h], (wpe, lnf_w, lnf_b, head weight)): the replicated tensors pass through the
        all-reduce of their gradients, the embedding and head too when replicated; vocabulary-parallel: the lookup
        of the vocabulary-parallel embedding, `loss_tile` tokens per collective (0: all), the sharded rows' gradients
        stay
        on their rank."""
        if self.vocab_parallel:
            wpe, lnf_w, lnf_b = comm_autograd.reduce_grads(self.group, self.wpe, self.lnf_w, self.lnf_b)
            x = vocab_parallel_embedding(input_ids, self.wte, self.group, self.cfg.vocab_size, loss_tile)
            return x, (wpe, lnf_w, lnf_b, self.head_weight())  # [b, t] -> [b, t, h]
        replicated = [self.wte, self.wpe, self.lnf_w, self.lnf_b] + ([] if self.cfg.tied else [self.head])
        wte, wpe, lnf_w, lnf_b, *head = comm_autograd.reduce_grads(self.group, *replicated)
        return F.embedding(input_ids, wte), (wpe, lnf_w, lnf_b, head[0] if head else wte)  # [b, t] -> [b, t, h]
