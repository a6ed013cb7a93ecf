"""`paradyse-lab plan | solvers solve | solvers compare | solvers bench` through `cli.main`."""

import csv
import json

import pytest

from paradyse_lab.cli import main

KEYS = ["solver", "status", "plan", "predicted_time_s", "peak_bytes", "solve_time_s", "head"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(capsys, *argv, match):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and match in err, err
    return err


@pytest.mark.parametrize("solver", ["heuristic", "dp", "ilp", "static:metp+recompute"])
def test_plan_json(capsys, solver):
    code, out, _ = run(capsys, "plan", "--model", "gpt", "--seq", "256K", "--solver", solver, "--recompute",
                       "--format", "json")
    assert code == 0
    d = json.loads(out)
    assert list(d) == KEYS
    assert len(d["plan"]) == 8 and d["status"] in ("optimal", "feasible")
    assert d["peak_bytes"] <= 85_198_045_184  # 79.35 GiB, the A100-80GB's memory


def test_plan_sublayer_table_and_budget(capsys):
    code, out, _ = run(capsys, "plan", "--model", "gpt", "--seq", "64K", "--granularity", "sublayer",
                       "--budget-gib", "50", "--solver", "dp")
    assert code == 0 and "16 decisions x 4 options" in out and "solver dp: optimal" in out
    assert "budget 50.00 GiB per GPU" in out  # the unit the flag is given in is the unit printed
    code, out, err = run(capsys, "plan", "--model", "gpt", "--seq", "64K", "--budget-gib", "1", "--format", "json")
    assert code == 1 and json.loads(out)["status"] == "infeasible"  # no plan fits: non-zero, with the reason
    assert err.count("\n") == 1 and "no plan fits" in err and "1.00 GiB" in err


def test_budget_gb_is_deprecated_and_converted_from_gb(capsys):
    code, out, err = run(capsys, "plan", "--model", "gpt", "--seq", "64K", "--budget-gb", "50", "--solver", "dp")
    assert code == 0 and "budget 46.57 GiB per GPU" in out  # 50e9 bytes
    assert "--budget-gb is deprecated" in err and "--budget-gib" in err
    one_line_error(capsys, "plan", "--model", "gpt", "--seq", "64K", "--budget-gb", "50", "--budget-gib", "40",
                   match="not both")


def test_plan_table_infeasible_exits_1_with_the_reason(capsys):
    code, out, err = run(capsys, "plan", "--model", "gpt", "--seq", "4M", "--solver", "dp")
    assert code == 1 and "solver dp: infeasible" in out
    assert "error: no plan fits" in err and "78.35 GiB" in err  # the GPU memory less the 1 GiB reserve


def test_gpus_plans_another_gpu_count_without_a_file(capsys):
    code, out, _ = run(capsys, "plan", "--model", "gpt", "--seq", "64K", "--gpus", "4", "--format", "json")
    at4 = json.loads(out)
    code8, out8, _ = run(capsys, "plan", "--model", "gpt", "--seq", "64K", "--format", "json")
    assert code == code8 == 0 and at4["peak_bytes"] > json.loads(out8)["peak_bytes"]  # half the GPUs: more per GPU
    one_line_error(capsys, "plan", "--model", "gpt", "--seq", "64K", "--gpus", "0", match="--gpus must be a positive")


def test_plan_bad_input(capsys):
    one_line_error(capsys, "plan", "--model", "gpt", "--seq", "64K", "--solver", "nope",
                   match="unknown solver 'nope'; valid: heuristic, dp, ilp")
    one_line_error(capsys, "plan", "--model", "gpt", "--seq", "64K", "--budget-gib", "-3",
                   match="--budget-gib must be a positive number")
    one_line_error(capsys, "plan", "--model", "gpt", "--seq", "abc", match="--seq must be a positive integer")
    one_line_error(capsys, "plan", "--model", "gpt", "--seq", "64K", "--solver", "static:nope",
                   match="unknown option 'nope'")
    one_line_error(capsys, "plan", "--model", "gpt", "--seq", "8008", "--solver", "static:metp",
                   match="static:metp cannot run this shape")


def test_solve_a_problem_file(capsys, tmp_path):
    problem = {"layers": 3, "options": ["a", "b"], "time_s": [[1, 2], [1, 2], [1, 2]],
               "kept_bytes": [[10, 4], [10, 4], [10, 4]], "transient_bytes": [[0, 0], [0, 0], [0, 0]],
               "switch_s": [[0, 0.5], [0.5, 0]], "fixed_bytes": 0, "budget_bytes": 24}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(problem))
    for solver in ("dp", "ilp", "brute_force"):
        code, out, _ = run(capsys, "solvers", "solve", "--problem", str(path), "--solver", solver, "--format", "json")
        d = json.loads(out)
        assert code == 0 and d["status"] == "optimal" and d["plan"] in (["a", "a", "b"], ["b", "a", "a"])
        assert d["predicted_time_s"] == 4.5 and d["peak_bytes"] == 24  # one switch (0.5) beats a second b
    code, out, _ = run(capsys, "solvers", "solve", "--problem", str(path), "--solver", "heuristic")
    assert code == 0 and "solver heuristic" in out


def test_solve_bad_files(capsys, tmp_path):
    one_line_error(capsys, "solvers", "solve", "--problem", str(tmp_path / "none.json"), match="not found")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"layers": 1, "options": ["a"], "time_s": [[1]], "kept_bytes": [[-1]],
                               "transient_bytes": [[0]], "fixed_bytes": 0, "budget_bytes": 1}))
    one_line_error(capsys, "solvers", "solve", "--problem",
                   str(bad), match="bad.json: kept_bytes must hold finite values >= 0")
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"layers": 30, "options": ["a", "b"], "time_s": [[1, 2]] * 30,
                               "kept_bytes": [[1, 1]] * 30, "transient_bytes": [[0, 0]] * 30,
                               "fixed_bytes": 0, "budget_bytes": 100}))
    one_line_error(capsys, "solvers", "solve", "--problem", str(big), "--solver", "brute_force", match="refuses 2^30")


def test_compare_solvers(capsys):
    code, out, _ = run(capsys, "solvers", "compare", "--model", "gpt", "--seqs", "64K,256K", "--recompute",
                       "--format", "json")
    assert code == 0
    d = json.loads(out)
    assert [r["seq_len"] for r in d["results"]] == [65536, 262144]
    for r in d["results"]:
        opt = r["solutions"]["dp"]["predicted_time_s"]
        assert r["solutions"]["ilp"]["predicted_time_s"] == pytest.approx(opt, rel=1e-6)
        assert r["heuristic_gap"] >= -1e-12
    code, out, _ = run(capsys, "solvers", "compare", "--model", "gpt", "--seqs", "256K")
    assert code == 0 and "heuristic gap" in out and "static:metp" in out
    one_line_error(capsys, "solvers", "compare", "--model", "gpt", "--seqs", ",", match="--seqs needs")


def test_bench_solvers_writes_the_csv(capsys, tmp_path):
    out_csv = tmp_path / "sub" / "bench.csv"
    code, out, err = run(capsys, "solvers", "bench", "--sizes", "8", "--options", "4", "--instances", "1",
                         "--repeats", "1", "--out", str(out_csv), "--format", "json",
                         "--kinds", "random,random+switch,model,model-sublayer")  # groups: a benchmark of seconds
    assert code == 0
    rows = list(csv.DictReader(out_csv.open()))
    d = json.loads(out)
    assert len(rows) == len(d["rows"]) == 4 * 5  # 4 kinds x (heuristic, greedy, dp, ilp, brute_force)
    for r in rows:
        if r["solver"] in ("dp", "ilp", "brute_force"):
            assert float(r["max_gap_pct"]) == pytest.approx(0, abs=1e-4) and r["disagree"] == "0"
        else:
            assert float(r["mean_gap_pct"]) >= 0
    assert not list(out_csv.parent.glob("*.tmp"))
    one_line_error(capsys, "solvers", "bench", "--sizes", "x", match="--sizes must be a positive integer")
    one_line_error(capsys, "solvers", "bench", "--kinds", "foo", match="unknown kind 'foo'")
