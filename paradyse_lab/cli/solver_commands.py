"""`paradyse-lab plan | solve | compare-solvers`: strategy plans from the solvers.

Examples:
  paradyse-lab plan --model gpt --seq 256K --solver dp --recompute
  paradyse-lab plan --max-length --model llama3-8b --cluster h100-80gb-x8 --recompute --tiled-mlp --offload
  paradyse-lab plan --model gpt --documents 128K,64K,32K,32K --solver ilp   (one packed step)
  paradyse-lab solve --problem problem.json --solver ilp --format json
  paradyse-lab compare-solvers --model gpt --seqs 64K,128K,256K --recompute --granularity sublayer
"""

from __future__ import annotations

import sys

from paradyse_lab.cli.cost_command import (
    add_step_arguments,
    add_technique_arguments,
    parse_int,
    parse_options,
    step_of,
)
from paradyse_lab.cli.output import (
    add_budget_arguments,
    add_cluster_arguments,
    add_format_argument,
    add_reserve_argument,
    budget_bytes,
    cluster_of,
    format_bytes,
    format_seconds,
    print_json,
    print_table,
    reserve_bytes,
)
from paradyse_lab.core.layer_graph import GRANULARITIES
from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.costmodel.head_loss import HEAD_OPTIONS, HeadLossCostModel
from paradyse_lab.costmodel.lowering import problem_from_cost_model
from paradyse_lab.errors import UserInputError

SOLVER_HELP = "heuristic (the paper's Algorithm 1), dp, ilp, greedy, brute_force or static:NAME"
COMPARED = ("heuristic", "greedy", "dp", "ilp")


def _add_problem_arguments(p) -> None:
    p.add_argument("--model", required=True, help="preset name (see `paradyse-lab models`), config.json or a "
                   "model folder holding one")
    add_cluster_arguments(p)
    p.add_argument("--batch", default="1", help="sequences per step (default 1, as in the paper)")
    p.add_argument("--strategies", help="comma-separated strategy names (default: all usable)")
    p.add_argument("--recompute", action="store_true", help="also offer each strategy with recomputation")
    add_technique_arguments(p)
    p.add_argument("--granularity", choices=GRANULARITIES, default="block",
                   help="block: one choice per layer (the paper); sublayer: attention and MLP choose apart")
    add_budget_arguments(p)
    add_reserve_argument(p)


def register(sub) -> None:
    p = sub.add_parser("plan", help="choose a strategy per layer for one sequence length",
                       description="Build the search problem of a model at one sequence length under the "
                       "analytic cost model and solve it. Prints the plan (one option per decision), its "
                       "predicted time and exact peak memory per GPU.")
    _add_problem_arguments(p)
    add_step_arguments(p).add_argument(
        "--max-length", action="store_true",
        help="instead of one length: the longest that fits (with --recompute, --tiled-mlp, --offload, "
        "--granularity, --head), its plan, "
        "predicted step time and memory (json: max_length, step_time_s, memory)")
    p.add_argument("--head", choices=("auto",) + HEAD_OPTIONS, default="auto",
                   help="head and loss: whole logits, the tiled loss, vocab (the embedding and head sharded by "
                        "vocabulary rows, with the tiled loss), or auto (default: the fastest plan that fits)")
    p.add_argument("--solver", default="dp", help=f"{SOLVER_HELP} (default dp)")
    add_format_argument(p)
    p.set_defaults(func=run_plan)

    p = sub.add_parser("solve", help="solve a SearchProblem JSON file",
                       description="Solve a problem given in the SearchProblem JSON form (see README).")
    p.add_argument("--problem", required=True, help="path to the problem's JSON file")
    p.add_argument("--solver", default="dp", help=f"{SOLVER_HELP} (default dp)")
    add_format_argument(p)
    p.set_defaults(func=run_solve)

    p = sub.add_parser("compare-solvers", help="each solver's predicted time over sequence lengths",
                       description="For each length: the predicted time of the heuristic, greedy, dp, ilp and "
                       "every static strategy, and the heuristic's gap to the exact optimum (dp).")
    _add_problem_arguments(p)
    p.add_argument("--seqs", required=True, help="comma-separated lengths (e.g. 16K,64K,256K)")
    add_format_argument(p)
    p.set_defaults(func=run_compare)


def build_problem(args, seq_len: int | None = None, head: str = "whole") -> tuple[SearchProblem, str]:
    """The problem of --model/--cluster/--gpus/--strategies/--recompute/--granularity/--budget-gib/--reserve-gb
    at seq_len (default: the step of --seq or --documents) with the head option `head`, and what the step is."""
    from paradyse_lab.core.layer_graph import LayerGraph
    from paradyse_lab.core.model_spec import get_model
    from paradyse_lab.costmodel import AnalyticCostModel

    model = get_model(args.model)
    cluster = cluster_of(args)
    cm = HeadLossCostModel(AnalyticCostModel(model, cluster), head)
    reserve = reserve_bytes(args)
    budget = budget_bytes(args)
    if budget is None and reserve is not None:
        budget = cluster.memory_bytes - reserve
    if seq_len is None:
        cm, seq_len, batch, what = step_of(args, cm)
    else:
        batch = parse_int("--batch", args.batch)
        what = f"seq {seq_len}"
    problem = problem_from_cost_model(LayerGraph(model, args.granularity), cm, seq_len, batch, budget_bytes=budget,
                                      options=parse_options(args.strategies, args.recompute,
                                                            getattr(args, "tiled_mlp", False),
                                                            getattr(args, "offload", False)))
    return problem, what


def _infeasible_exit(problem: SearchProblem, solution) -> int:
    """Exit code of a solved problem: 0 when the plan fits, else 1 with the reason on stderr (the plan printed
    is then the least-memory one the solver knows, which does not fit)."""
    if solution.feasible:
        return 0
    print(f"error: no plan fits: the least-memory plan found needs {format_bytes(solution.peak_bytes)} per GPU, the "
          f"budget is {format_bytes(problem.budget_bytes)} (raise --budget-gib, add --recompute, --tiled-mlp or "
          "--offload, give more --gpus or a shorter step)", file=sys.stderr)
    return 1


def _print_solution(problem: SearchProblem, solution, fmt: str, title: str, head: str | None = None) -> int:
    """Print the plan (table or JSON); the exit code: 1 when no plan fits (`_infeasible_exit`), else 0."""
    if fmt == "json":
        print_json(solution.to_dict() | ({"head": head} if head else {}))
        return _infeasible_exit(problem, solution)
    print(title)
    for heading, names in (("left out (shapes do not split)", [n for n in problem.dropped if n not in problem.options]),
                           ("on some sub-layers only", [n for n in problem.dropped if n in problem.options])):
        if names:
            print(f"{heading}: " + "; ".join(f"{n}: {problem.dropped[n]}" for n in names))
    rows, start = [], 0
    for i in range(1, len(solution.plan) + 1):  # runs of one option
        if i == len(solution.plan) or solution.plan[i] != solution.plan[start]:
            span = problem.labels[start] + (f" .. {problem.labels[i - 1]}" if i - 1 > start else "")
            rows.append([span, i - start, solution.plan[start]])
            start = i
    print_table(["decisions", "count", "option"], rows)
    print(f"\nsolver {solution.solver}: {solution.status}; predicted time {format_seconds(solution.predicted_time_s)}; "
          f"peak {format_bytes(solution.peak_bytes)} of {format_bytes(problem.budget_bytes)}; "
          f"solved in {solution.solve_time_s * 1e3:.2f} ms")
    return _infeasible_exit(problem, solution)


def plan_heads(args) -> tuple[str, ...]:
    """The head options `plan` tries: --head, or every option usable at --gpus (auto); --head vocab at one GPU is
    refused (one shard is the whole table: the tiled loss, --head tiled)."""
    from paradyse_lab.core.model_spec import get_model
    from paradyse_lab.costmodel.head_loss import usable_heads

    gpus = cluster_of(args).gpus
    if args.head == "auto":
        return usable_heads(get_model(args.model), gpus)
    if args.head == "vocab" and gpus == 1:
        raise UserInputError("--head vocab shards the embedding and head by vocabulary rows over the GPUs: it needs "
                             "--gpus 2 or more (at one GPU it is the tiled loss: --head tiled)")
    return (args.head,)


def run_plan(args) -> int:
    from paradyse_lab.app.max_length import plan_length
    from paradyse_lab.solvers import get_solver

    heads = plan_heads(args)
    if args.max_length:
        return run_max_length(args, get_solver(args.solver), heads)
    built = {head: build_problem(args, head=head) for head in heads}  # bad input is refused here
    solver = get_solver(args.solver)  # after the input checks: the dp solver loads its compiled kernels (~1 s)
    planned = plan_length(lambda _seq, head: built[head][0], solver, 0, heads)
    problem, what = planned.problem, built[planned.head][1]
    title = (f"{args.model}, {what}, {args.granularity} granularity, {problem.num_decisions} decisions x "
             f"{problem.num_options} options, budget {format_bytes(problem.budget_bytes)} per GPU; head: "
             f"{planned.head}")
    return _print_solution(problem, planned.solution, args.format, title, planned.head)


def run_max_length(args, solver, heads: tuple[str, ...]) -> int:
    """`plan --max-length`: the longest length that fits, its plan, predicted step time and memory."""
    from paradyse_lab.app.api import memory_breakdown
    from paradyse_lab.app.max_length import longest_length
    from paradyse_lab.cli.cost_command import MAX_COUNT
    from paradyse_lab.core.model_spec import get_model
    from paradyse_lab.core.strategies import layout_unit

    model = get_model(args.model)
    p = cluster_of(args).gpus
    cap = model.max_positions or MAX_COUNT
    found = longest_length(lambda seq, head: build_problem(args, seq, head)[0], solver, layout_unit(p), cap, heads)
    if found is None:
        raise UserInputError(f"no length fits: {args.model} on {args.cluster} does not train even "
                             f"{layout_unit(p)} tokens within the budget")
    sol, problem = found.solution, found.problem
    memory = memory_breakdown(problem, sol.plan)
    if args.format == "json":
        print_json({"max_length": found.seq_len, "step_time_s": sol.predicted_time_s, "memory": memory,
                    "head": found.head, "plan": list(sol.plan), "solver": sol.solver, "model": args.model,
                    "cluster": args.cluster, "granularity": args.granularity, "recompute": args.recompute,
                    "tiled_mlp": args.tiled_mlp, "offload": args.offload})
        return 0
    print(f"{args.model} on {args.cluster}: the longest length that fits is {found.seq_len} tokens "
          f"({found.seq_len / 2**20:.3g}M); head: {found.head}; predicted step time "
          f"{format_seconds(sol.predicted_time_s)}")
    print_table(["memory per GPU", "bytes"], [[k, format_bytes(v)] for k, v in memory.items()])
    print()
    return _print_solution(problem, sol, "text", f"plan at {found.seq_len} tokens ({args.solver})", found.head)


def run_solve(args) -> int:
    from paradyse_lab.solvers import get_solver

    solver = get_solver(args.solver)
    problem = SearchProblem.from_json(args.problem)
    title = f"{args.problem}: {problem.num_decisions} decisions x {problem.num_options} options"
    return _print_solution(problem, solver.solve(problem), args.format, title)


def run_compare(args) -> int:
    from paradyse_lab.solvers import get_solver

    seqs = [parse_int("--seqs", s) for s in args.seqs.split(",") if s.strip()]
    if not seqs:
        raise UserInputError("--seqs needs at least one length, e.g. 16K,64K")
    results = []
    for seq in seqs:
        problem, _ = build_problem(args, seq)
        names = list(COMPARED) + [f"static:{o}" for o in problem.options]
        sols = {n: get_solver(n).solve(problem) for n in names}
        opt, heur = sols["dp"], sols["heuristic"]
        gap = None
        if opt.feasible and heur.feasible:
            gap = (heur.predicted_time_s - opt.predicted_time_s) / opt.predicted_time_s
        results.append({"seq_len": seq, "budget_bytes": problem.budget_bytes, "heuristic_gap": gap,
                        "solutions": {n: s.to_dict() for n, s in sols.items()}})
    if args.format == "json":
        print_json({"model": args.model, "granularity": args.granularity, "recompute": args.recompute,
                    "results": results})
        return 0
    names = list(results[0]["solutions"])
    for r in results[1:]:
        names += [n for n in r["solutions"] if n not in names]
    rows = []
    for r in results:
        row = [r["seq_len"]]
        for n in names:
            s = r["solutions"].get(n)
            row.append("-" if s is None else ("OOM" if s["status"] == "infeasible"
                                              else f"{s['predicted_time_s']:.4f}"))
        gap = r["heuristic_gap"]
        row.append("-" if gap is None else f"{100 * gap:.2f}%")
        if r["solutions"]["heuristic"]["status"] == "infeasible" and r["solutions"]["dp"]["status"] != "infeasible":
            row[-1] = "heuristic OOM"
        rows.append(row)
    print(f"{args.model}, {args.granularity} granularity{', with recomputation' if args.recompute else ''}: "
          "predicted time per step in seconds (OOM: no plan fits)")
    print_table(["seq"] + names + ["heuristic gap"], rows)
    return 0
