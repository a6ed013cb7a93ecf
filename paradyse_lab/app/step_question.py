"""One planning question and its answer: the model, cluster, step and options that `paradyse-lab cost`,
`paradyse-lab plan` and the API's `plan_step` all ask, with one set of defaults, so that the same flags give
the same plan, time and memory through the three.

A question fixes the cost model (a name, built at the question's GPU count), the budget (`--budget-gib`, else
the GPU's memory less `--reserve-gib`, else less the cluster's reserve; a learned model's cap applies as for
every planner), the step (one sequence of `seq_len` tokens, `batch` of them, or one pack of `documents`), the
options (`strategies`, `recompute`, `tiled`, `offload`), the granularity and the head option: `auto` (the
default) tries every head option usable at the GPU count and keeps the fastest plan that fits; `whole`,
`tiled` or `vocab` fixes it. A step longer than a model's learned positions is refused: it has no position
embedding past them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from paradyse_lab.cluster.files import cluster_with_gpus, get_cluster
from paradyse_lab.cluster.presets import DEFAULT_CLUSTER
from paradyse_lab.core.layer_graph import LayerGraph
from paradyse_lab.core.model_spec import ModelSpec, get_model
from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.core.strategies import CATALOG, TWO_D, USABLE, StrategyOption, layout_unit
from paradyse_lab.costmodel import uniform_plan_cost
from paradyse_lab.costmodel.head_loss import HEAD_OPTIONS, HeadLossCostModel, cheapest_head, usable_heads
from paradyse_lab.costmodel.lowering import problem_from_cost_model
from paradyse_lab.costmodel.packed import PackedCostModel, PackedStep
from paradyse_lab.errors import UserInputError, unknown_name
from paradyse_lab.simulator.planner import planning_model

HEAD_CHOICES = ("auto",) + HEAD_OPTIONS
"""What a question's `head` may be: auto (the fastest that fits) or one head option."""


@dataclass(frozen=True)
class StepQuestion:
    """What to plan (module docstring); every command and the API fill one and ask `plan_question` or
    `uniform_costs`."""

    model: object
    """Preset name, config.json, a folder holding one, or a ModelSpec."""
    cluster: str = ""
    """Preset or .toml ('' the default cluster)."""
    gpus: int | None = None
    """GPUs planned for (None: the cluster's own count)."""
    seq_len: int | None = None
    documents: tuple[int, ...] | None = None
    batch: int = 1
    strategies: tuple[str, ...] | None = None
    recompute: bool = False
    tiled: bool = False
    offload: bool = False
    headchunk: bool = False
    two_d: bool = False
    """Also offer the two-dimensional strategies (`ulysses_ring:a` and `megatron_cp:a`, every degree; `--two-d`)."""
    granularity: str = "block"
    head: str = "auto"
    budget_bytes: int | None = None
    reserve_bytes: int | None = None
    cost_model: str = "auto"
    profiles: str = ""
    kv_heads: int | None = None


@dataclass(frozen=True)
class PlannedStep:
    """The answer: the problem of the chosen head, the solver's solution, the head and what the step is."""

    problem: SearchProblem
    solution: object
    head: str
    what: str
    seq_len: int
    p: int
    """GPUs planned for."""


def model_of(q: StepQuestion):
    """The question's ModelSpec, with `kv_heads` applied (named 'NAME kv=N')."""
    model = q.model if isinstance(q.model, ModelSpec) else get_model(str(q.model))
    if q.kv_heads is None:
        return model
    if model.heads % q.kv_heads:
        raise UserInputError(f"--kv-heads must divide the model's heads ({model.heads}), got {q.kv_heads}")
    return replace(model, kv_heads=q.kv_heads, name=f"{model.name} kv={q.kv_heads}")


def cluster_of(q: StepQuestion):
    """The question's ClusterSpec at its GPU count."""
    return cluster_with_gpus(get_cluster(q.cluster or DEFAULT_CLUSTER), q.gpus)


def heads_of(q: StepQuestion, model, p: int) -> tuple[str, ...]:
    """The head options the question tries: its head, or every one usable at `p` GPUs (auto); 'vocab' at one
    GPU is refused (its one shard is the whole table: the tiled loss)."""
    if q.head == "auto":
        return usable_heads(model, p)
    if q.head not in HEAD_OPTIONS:
        raise unknown_name("--head", q.head, HEAD_CHOICES)
    if q.head == "vocab" and p == 1:
        raise UserInputError("--head vocab shards the embedding and head by vocabulary rows over the GPUs: it needs "
                             "--gpus 2 or more (at one GPU it is the tiled loss: --head tiled)")
    return (q.head,)


def check_positions(model, seq_len: int) -> None:
    """Refuse a step longer than a model's learned position embeddings (rotary models have no such limit)."""
    if model.position_rows and seq_len > model.position_rows:
        raise UserInputError(f"seq_len {seq_len} is beyond {model.name}'s {model.position_rows} learned positions "
                             f"(it has no position embedding past them): give at most {model.position_rows}, or "
                             "a model with rotary positions")


def option_list(names, recompute: bool = False, tiled: bool = False, offload: bool = False,
                headchunk: bool = False, two_d: bool = False) -> list:
    """The options of `names` (`NAME[+recompute][+tiled][+headchunk][+offload]`; default: the paper's usable
    strategies), with `two_d` also the two-dimensional ones (each offered where its shapes split); each flag given
    adds every option so far with it (`headchunk`: those of a strategy that offers it)."""
    opts = [StrategyOption.parse(n) for n in (*(names or USABLE), *(TWO_D if two_d else ()))]
    for flag, wanted in (("recompute", recompute), ("tiled", tiled), ("headchunk", headchunk), ("offload", offload)):
        if wanted:
            opts += [replace(o, **{flag: True}) for o in opts if not getattr(o, flag)
                     and (flag != "headchunk" or CATALOG[o.strategy].head_chunks == "yes")]
    return list(dict.fromkeys(opts))


class QuestionContext:
    """The question's model, cluster, base cost model and budget, built once and asked per length and head."""

    def __init__(self, q: StepQuestion):
        self.q = q
        self.model = model_of(q)
        self.cluster = cluster_of(q)
        budget = q.budget_bytes
        if budget is None and q.reserve_bytes is not None:
            if q.reserve_bytes >= self.cluster.memory_bytes:  # no memory would be left to plan in
                memory = self.cluster.memory_bytes / 2**30
                raise UserInputError(f"--reserve-gib {q.reserve_bytes / 2**30:.10g} is not below the GPU memory of "
                                     f"{self.cluster.name} ({memory:g} GiB per {self.cluster.gpu_name}): give "
                                     f"less than {memory:g}")
            budget = self.cluster.memory_bytes - q.reserve_bytes
        planning = planning_model(self.model, self.cluster, cost_model=q.cost_model, p=self.cluster.gpus,
                                  profiles=q.profiles or None, budget_bytes=budget)
        self.base = planning.cost_model
        self.budget_bytes = planning.plan_budget_bytes
        self.heads = heads_of(q, self.model, self.cluster.gpus)

    def step(self, cm, seq_len: int | None = None):
        """(cost model to ask, seq_len, batch, what the step is) of the question's step, or of `seq_len`."""
        q = self.q
        if seq_len is None and q.documents is not None:
            if q.batch != 1:
                raise UserInputError(f"--documents is one packed step: --batch must be 1, got {q.batch}")
            step = PackedStep(tuple(q.documents), layout_unit(cm.p))
            check_positions(self.model, step.padded_len)
            return (PackedCostModel(cm, step), step.padded_len, 1,
                    f"one packed step of {len(q.documents)} documents, {step.tokens} tokens padded to "
                    f"{step.padded_len}")
        seq = q.seq_len if seq_len is None else seq_len
        if seq is None:
            raise UserInputError("a step needs exactly one of seq_len (one sequence) and documents (one pack)")
        check_positions(self.model, seq)
        return cm, seq, q.batch, f"seq {seq}, batch {q.batch}"

    def options(self):
        return option_list(self.q.strategies, self.q.recompute, self.q.tiled, self.q.offload, self.q.headchunk,
                           self.q.two_d)

    def problem(self, head: str, seq_len: int | None = None) -> tuple[SearchProblem, str, int]:
        """(problem, what the step is, its tokens) with head option `head`, at the question's step or `seq_len`."""
        cm, seq, batch, what = self.step(HeadLossCostModel(self.base, head), seq_len)
        problem = problem_from_cost_model(LayerGraph(self.model, self.q.granularity), cm, seq, batch,
                                          budget_bytes=self.budget_bytes, options=self.options())
        return problem, what, seq


def plan_question(q: StepQuestion, solver) -> PlannedStep:
    """The fastest plan that fits over the question's head options (the first head's infeasible one when none
    fits); `solver` a solver object (solvers.get_solver)."""
    ctx = QuestionContext(q)
    built = {head: ctx.problem(head) for head in ctx.heads}  # bad input is refused here, before solving
    head, solution = cheapest_head(lambda h: solver.solve(built[h][0]), ctx.heads)
    problem, what, seq = built[head]
    return PlannedStep(problem, solution, head, what, seq, ctx.cluster.gpus)


@dataclass(frozen=True)
class UniformCosts:
    """`cost`'s answer: each option on every layer (its fastest head that fits), the options that cannot split
    the model, the per-head costs of the embedding, head and loss, and the step."""

    costs: list
    heads: dict[str, str]
    """Option -> head option its row is costed with."""
    refused: dict[str, str]
    head_parts: dict
    cost_model: object
    seq_len: int
    batch: int
    what: str
    context: QuestionContext


def uniform_costs(q: StepQuestion) -> UniformCosts:
    """Each option on every layer under the question's head options: per option the fastest head that fits (the
    first when none does), as `plan_question` picks heads; options whose shapes do not split are listed apart."""
    ctx = QuestionContext(q)
    costs, heads, refused = [], {}, {}
    models = {h: ctx.step(HeadLossCostModel(ctx.base, h)) for h in ctx.heads}
    for o in ctx.options():
        try:
            models[ctx.heads[0]][0].check(o, models[ctx.heads[0]][1], models[ctx.heads[0]][2])
        except UserInputError as err:
            refused[o.name] = str(err)
            continue
        per_head = {h: replace(uniform_plan_cost(cm, o, seq, batch), memory_bytes=ctx.budget_bytes)
                    for h, (cm, seq, batch, _) in models.items()}  # fits: within the budget a plan gets
        head, best = cheapest_head(lambda h, costs_of=per_head: _Fit(costs_of[h]), ctx.heads)
        costs.append(best.cost)
        heads[o.name] = head
    if not costs:
        raise UserInputError("no strategy can split this model at this size: " + "; ".join(refused.values()))
    cm, seq, batch, what = models[ctx.heads[0]]
    return UniformCosts(costs, heads, refused, head_parts(ctx, seq, batch), cm, seq, batch, what, ctx)


class _Fit:
    """A uniform cost seen as a solution (`feasible`, `predicted_time_s`) for `cheapest_head`."""

    def __init__(self, cost):
        self.cost = cost
        self.feasible = cost.fits
        self.predicted_time_s = cost.total_time_s


def head_parts(ctx: QuestionContext, seq: int, batch: int) -> dict:
    """Per usable head option: time, kept, transient and model-state bytes of the embedding, head and loss;
    empty for a model without them."""
    if not ctx.model.embedding_and_head:
        return {}
    out = {}
    for head in usable_heads(ctx.model, ctx.cluster.gpus):
        f = HeadLossCostModel(ctx.base, head).fixed(seq, batch)
        out[head] = {"time_s": f.time_s, "kept_bytes": f.kept_bytes, "transient_bytes": f.transient_bytes,
                     "model_state_bytes": f.model_state_bytes}
    return out
