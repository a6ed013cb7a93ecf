"""Dynamic policies plan over the head options (paradyse_lab/costmodel/head_loss.py) and the simulator charges a
plan with the head its policy chose: a short step keeps the whole head (pays nothing for the tiling), a step whose
whole logits do not fit takes the tiled loss and fits (among the replicated heads); the vocabulary-parallel head is
taken where it is the fastest; `train` runs the tiled loss exactly when the plan says so."""

from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.core.layer_graph import LayerGraph
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.plan import Plan
from paradyse_lab.costmodel import AnalyticCostModel
from paradyse_lab.simulator.engine import Charger
from paradyse_lab.simulator.policies import DynamicPolicy, StepDecision

LONG = 512 * 1024


def test_the_policy_tiles_the_loss_only_where_the_whole_head_does_not_fit():
    model, cluster = get_model("llama3-8b"), get_cluster("h100-80gb-x8")
    cm, graph = AnalyticCostModel(model, cluster), LayerGraph(model)
    budget = cluster.plan_budget_bytes
    charger = Charger(graph, cm, budget, recompute=True)
    replicated = DynamicPolicy("dp", cm, graph, budget, recompute=True)
    replicated._head_models = {h: replicated._head_models[h] for h in ("whole", "tiled")}
    short = replicated.decide(16 * 1024, 1)
    assert short.head == "whole" and short.feasible
    whole_only = DynamicPolicy("dp", cm, graph, budget, recompute=True)
    whole_only._head_models = {"whole": cm}
    assert not whole_only.decide(LONG, 1).feasible  # the whole logits do not fit at 512K
    long = replicated.decide(LONG, 1)
    assert long.head == "tiled" and long.feasible
    _, peak = charger.charge(long.plan.names, LONG, 1, long.head)
    assert peak <= budget < charger.charge(long.plan.names, LONG, 1)[1]
    assert replicated.decide(LONG, 1).cached and replicated.decide(LONG, 1).head == "tiled"


def test_the_policy_takes_the_vocabulary_parallel_head_where_it_is_fastest():
    """Llama-3-8B on 8 GPUs at 16K: the sharded head drops the all-reduce of the [V, h] gradients (2 GiB) for
    per-token collectives, faster than the whole head; the chosen plan's time is the cheapest head's."""
    model, cluster = get_model("llama3-8b"), get_cluster("h100-80gb-x8")
    cm, graph = AnalyticCostModel(model, cluster), LayerGraph(model)
    policy = DynamicPolicy("dp", cm, graph, cluster.plan_budget_bytes, recompute=True)
    short = policy.decide(16 * 1024, 1)
    times = {h: policy.solver.solve(policy.problem(16 * 1024, 1, h)).predicted_time_s for h in ("whole", "vocab")}
    assert short.head == "vocab" and short.feasible and times["vocab"] < times["whole"]
    assert short.predicted_time_s == times["vocab"]
    assert policy.storage_head(16 * 1024, 1) == "vocab"  # what `train` stores the embedding and head by
    policy.restrict_heads(("whole", "tiled"))  # a run whose storage is replicated plans with those heads alone
    assert policy.decide(16 * 1024, 1).head == "whole"


def test_the_longest_steps_problems_are_solved_once_for_the_storage_and_the_step():
    """`storage_head` solves the run's longest step under every head option; that step's `decide` takes those
    solutions (the same plan a policy that never fixed its storage decides) instead of solving again."""
    model, cluster = get_model("llama3-8b"), get_cluster("h100-80gb-x8")
    cm, graph = AnalyticCostModel(model, cluster), LayerGraph(model)
    fresh = DynamicPolicy("dp", cm, graph, cluster.plan_budget_bytes, recompute=True).decide(16 * 1024, 1)
    policy = DynamicPolicy("dp", cm, graph, cluster.plan_budget_bytes, recompute=True)
    solved = []
    solve = policy.solver.solve
    policy.solver.solve = lambda problem: solved.append(problem) or solve(problem)
    assert policy.storage_head(16 * 1024, 1) == "vocab" and len(solved) == 3  # whole, tiled, vocab
    policy.restrict_heads(("vocab",))
    assert list(policy._solved) == [(1, 16 * 1024, "vocab")]  # the dropped heads' solutions are not kept
    step = policy.decide(16 * 1024, 1)
    assert len(solved) == 3 and not step.cached and step.head == "vocab" and not policy._solved
    assert (step.plan, step.predicted_time_s, step.feasible) == (fresh.plan, fresh.predicted_time_s, fresh.feasible)
    policy.decide(8 * 1024, 1)  # a shorter step: solved now
    assert len(solved) == 4


def test_train_runs_the_tiled_loss_when_the_plan_says_so():
    from paradyse_lab.core.model_spec import ModelSpec
    from paradyse_lab.runtime.model.parallel_gpt import ParallelGPT
    from paradyse_lab.runtime.training.plan_handoff import loss_tile

    model = ParallelGPT(ModelSpec(vocab_size=64, max_positions=32, hidden=16, heads=2, layers=1, name="runtime"))
    assert loss_tile(StepDecision(Plan.from_names(("metp",), "block"), 1.0, True, 0.0), model, 96) == 0
    assert loss_tile(StepDecision(Plan.from_names(("metp",), "block"), 1.0, True, 0.0, head="tiled"), model, 96) == 96
    rows = ParallelGPT(ModelSpec(vocab_size=2**18, max_positions=32, hidden=16, heads=2, layers=1,
                                 name="runtime"), vocab_parallel=True)
    vocab = StepDecision(Plan.from_names(("metp",), "block"), 1.0, True, 0.0, head="vocab")
    assert loss_tile(vocab, rows, 1000) == 2**30 // (2**18 * 8) == 512  # a tile's [p k, R] (4 + e bytes): 1 GiB


def test_one_process_stores_the_replicated_head_and_plans_without_vocab():
    """`train` on one process keeps the replicated embedding and head, and its policy never plans 'vocab' (which
    its model would not run)."""
    from paradyse_lab.runtime.training.plan_handoff import vocab_storage

    model, cluster = get_model("llama3-8b"), get_cluster("h100-80gb-x8")
    policy = DynamicPolicy("dp", AnalyticCostModel(model, cluster, p=1), LayerGraph(model), 10**15)
    assert not vocab_storage(policy, 16 * 1024, 1, None) and tuple(policy._head_models) == ("whole", "tiled")


def test_simulate_fixes_the_head_storage_for_the_run_as_train_does():
    # gpt2 on 8 A100s: alone, 1024 tokens take the vocabulary-parallel head and 8192 the whole one; a run stores the
    # embedding and head one way (train's vocab_storage), chosen at its longest step, so both steps plan 'whole'
    from paradyse_lab.simulator.engine import simulate
    from paradyse_lab.simulator.planner import build_planner
    from paradyse_lab.workload.lengths import Workload

    planner = build_planner("dynamic:dp", get_model("gpt2"), get_cluster("a100-80gb-x8"))
    alone = [build_planner("dynamic:dp", get_model("gpt2"), get_cluster("a100-80gb-x8")).policy.decide(n, 1).head
             for n in (1024, 8192)]
    assert alone == ["vocab", "whole"]
    heads, decide = [], planner.policy.decide
    planner.policy.decide = lambda step, batch: _record(heads, decide(step, batch))
    rows = simulate(Workload("two", (1024, 8192)), planner.policy, planner.charger())
    assert len(rows) == 2 and not rows["oom"].any() and heads == ["whole", "whole"]


def _record(heads: list, decision):
    heads.append(decision.head)
    return decision
