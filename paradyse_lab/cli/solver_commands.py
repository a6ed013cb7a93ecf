"""`paradyse-lab plan | solvers solve | solvers compare`: strategy plans from the solvers.

Examples:
  paradyse-lab plan --model gpt --seq 256K --solver dp --recompute
  paradyse-lab plan --max-length --model llama3-8b --cluster h100-80gb-x8 --recompute --tiled-mlp --offload
  paradyse-lab plan --model gpt --documents 128K,64K,32K,32K --solver ilp   (one packed step)
  paradyse-lab solvers solve --problem problem.json --solver ilp --format json
  paradyse-lab solvers compare --model gpt --seqs 64K,128K,256K --recompute --granularity sublayer
"""

from __future__ import annotations

import sys

from paradyse_lab.app.api import memory_breakdown
from paradyse_lab.app.max_length import longest_length
from paradyse_lab.app.step_question import QuestionContext, plan_question
from paradyse_lab.cli.cost_command import (
    MAX_COUNT,
    add_question_arguments,
    add_step_arguments,
    parse_int,
    question_of,
)
from paradyse_lab.cli.output import (
    add_format_argument,
    format_bytes,
    format_seconds,
    print_json,
    print_table,
)
from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.core.strategies import layout_unit
from paradyse_lab.errors import UserInputError
from paradyse_lab.solvers import get_solver

SOLVER_HELP = "heuristic (the paper's Algorithm 1), dp, ilp, greedy, brute_force or static:NAME"
COMPARED = ("heuristic", "greedy", "dp", "ilp")


def register(sub) -> None:
    p = sub.add_parser("plan", help="choose a strategy per layer for one sequence length",
                       description="Build the search problem of a model at one sequence length under a "
                       "cost model (default auto: the replay model where the cluster has kernel tables, else "
                       "analytic) and solve it. Prints the plan (one option per decision), its "
                       "head option, predicted time and exact peak memory per GPU; `paradyse-lab cost` and the "
                       "API's plan_step take the same flags and give the same answer.")
    add_question_arguments(p)
    add_step_arguments(p).add_argument(
        "--max-length", action="store_true",
        help="instead of one length: the longest that fits (with --recompute, --tiled-mlp, --offload, "
        "--granularity, --head), its plan, "
        "predicted step time and memory (json: max_length, step_time_s, memory)")
    p.add_argument("--solver", default="dp", help=f"{SOLVER_HELP} (default dp)")
    add_format_argument(p)
    p.set_defaults(func=run_plan)

    p = sub.add_parser("solve", help="solve a SearchProblem JSON file",
                       description="Solve a search problem given as JSON: per layer and option its time, kept and "
                       "transient bytes, and the memory budget (the format is in the results docs, \"Solvers\").")
    p.add_argument("--problem", required=True, help="path to the problem's JSON file")
    p.add_argument("--solver", default="dp", help=f"{SOLVER_HELP} (default dp)")
    add_format_argument(p)
    p.set_defaults(func=run_solve)

    p = sub.add_parser("compare-solvers", help="each solver's predicted time over sequence lengths",
                       description="For each length: the predicted time of the heuristic, greedy, dp, ilp and "
                       "every static strategy, and the heuristic's gap to the exact optimum (dp).")
    add_question_arguments(p, head=False)
    p.add_argument("--seqs", required=True, help="comma-separated lengths (e.g. 16K,64K,256K)")
    add_format_argument(p)
    p.set_defaults(func=run_compare)


def build_problem(args, seq_len: int | None = None, head: str = "whole") -> tuple[SearchProblem, str]:
    """The problem of the question of `args` (cost_command.question_of) at seq_len (default: the step of --seq
    or --documents) with the head option `head`, and what the step is."""
    problem, what, _ = QuestionContext(question_of(args, seq_len)).problem(head)
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
    for i in range(1, len(solution.assignment) + 1):  # runs of one option
        if i == len(solution.assignment) or solution.assignment[i] != solution.assignment[start]:
            span = problem.labels[start] + (f" .. {problem.labels[i - 1]}" if i - 1 > start else "")
            rows.append([span, i - start, solution.assignment[start]])
            start = i
    print_table(["decisions", "count", "option"], rows)
    print(f"\nsolver {solution.solver}: {solution.status}; predicted time {format_seconds(solution.predicted_time_s)}; "
          f"peak {format_bytes(solution.peak_bytes)} of {format_bytes(problem.budget_bytes)}; "
          f"solved in {solution.solve_time_s * 1e3:.2f} ms")
    return _infeasible_exit(problem, solution)


def run_plan(args) -> int:
    if args.max_length:
        return run_max_length(args, get_solver(args.solver))
    question = question_of(args)
    planned = plan_question(question, _LazySolver(args.solver))
    problem = planned.problem
    title = (f"{args.model}, {planned.what}, {args.granularity} granularity, {problem.num_decisions} decisions x "
             f"{problem.num_options} options, budget {format_bytes(problem.budget_bytes)} per GPU; head: "
             f"{planned.head}")
    return _print_solution(problem, planned.solution, args.format, title, planned.head)


class _LazySolver:
    """A solver got on its first use, after the input checks (the dp solver loads its compiled kernels, ~1 s)."""

    def __init__(self, name: str):
        self.name, self.solver = name, None

    def solve(self, problem):
        if self.solver is None:
            self.solver = get_solver(self.name)
        return self.solver.solve(problem)


def run_max_length(args, solver) -> int:
    """`plan --max-length`: the longest length that fits, its plan, predicted step time and memory."""
    ctx = QuestionContext(question_of(args, seq_len=1))
    model, p, heads = ctx.model, ctx.cluster.gpus, ctx.heads
    cap = model.max_positions or MAX_COUNT
    found = longest_length(lambda seq, head: ctx.problem(head, seq)[0], solver, layout_unit(p), cap, heads)
    if found is None:
        raise UserInputError(f"no length fits: {args.model} on {args.cluster} does not train even "
                             f"{layout_unit(p)} tokens within the budget")
    sol, problem = found.solution, found.problem
    memory = memory_breakdown(problem, sol.assignment)
    if args.format == "json":
        print_json({"max_length": found.seq_len, "step_time_s": sol.predicted_time_s, "memory": memory,
                    "head": found.head, "plan": list(sol.assignment), "solver": sol.solver, "model": args.model,
                    "cluster": args.cluster, "granularity": args.granularity, "recompute": args.recompute,
                    "tiled_mlp": args.tiled_mlp, "offload": args.offload,
                    "head_chunks": args.head_chunks})
        return 0
    print(f"{args.model} on {args.cluster}: the longest length that fits is {found.seq_len} tokens "
          f"({found.seq_len / 2**20:.3g}M); head: {found.head}; predicted step time "
          f"{format_seconds(sol.predicted_time_s)}")
    print_table(["memory per GPU", "bytes"], [[k, format_bytes(v)] for k, v in memory.items()])
    print()
    return _print_solution(problem, sol, "text", f"plan at {found.seq_len} tokens ({args.solver})", found.head)


def run_solve(args) -> int:
    solver = get_solver(args.solver)
    problem = SearchProblem.from_json(args.problem)
    title = f"{args.problem}: {problem.num_decisions} decisions x {problem.num_options} options"
    return _print_solution(problem, solver.solve(problem), args.format, title)


def run_compare(args) -> int:
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
