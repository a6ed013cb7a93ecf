"""Bad inputs for every command (tests/paradyse_lab/cli/test_bad_inputs.py): each must end in one line on stderr
and exit 2.

`make_fixtures(root)` writes the malformed files the cases name; `CASES` is (id, argv) with `{d}` standing
for that folder.
"""

from __future__ import annotations

import json
from pathlib import Path

GOOD_PROBLEM = {"layers": 2, "options": ["a", "b"], "time_s": [[1.0, 2.0], [1.0, 2.0]],
                "kept_bytes": [[1, 2], [1, 2]], "transient_bytes": [[1, 1], [1, 1]], "fixed_bytes": 0,
                "budget_bytes": 100}


def _problem(**changes) -> str:
    return json.dumps({**GOOD_PROBLEM, **changes})

G2 = '"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 100, "n_positions": 64'
LL = ('"model_type": "llama", "hidden_size": 96, "num_attention_heads": 8, "num_key_value_heads": 2, '
      '"num_hidden_layers": 2, "intermediate_size": 192, "vocab_size": 100, "max_position_embeddings": 64')
SWEEP_FILES = {
    "cfg_embd_float.json": "{" + G2 + ', "n_embd": 64.9}',
    "cfg_layer_1e400.json": "{" + G2 + ', "n_layer": 1e400}',
    "cfg_layer_2^53.json": "{" + G2 + ', "n_layer": 9007199254740993}',
    "cfg_tie_string.json": "{" + LL + ', "tie_word_embeddings": "false"}',
    "cfg_kv_0.json": "{" + LL + ', "num_key_value_heads": 0}',
    "cfg_kv_3.json": "{" + LL + ', "num_key_value_heads": 3}',
    "cfg_dtype_f64.json": "{" + LL + ', "torch_dtype": "float64"}',
    "cfg_eps_neg.json": "{" + G2 + ', "layer_norm_epsilon": -1e-05}',
    "cfg_rms_nan.json": "{" + LL + ', "rms_norm_eps": NaN}',
    "cfg_theta_str.json": "{" + LL + ', "rope_theta": "1e4"}',
    "cfg_head_dim_float.json": "{" + LL + ', "head_dim": 12.0}',
    "cfg_type_number.json": "{" + G2 + ', "model_type": 7}',
    "cfg_array.json": "[1]",
    "cfg_bias_int.json": "{" + LL + ', "attention_bias": 1, "mlp_bias": 1}',
    "cfg_vocab_str.json": "{" + G2 + ', "vocab_size": "100"}',
    "cfg_head_bool.json": "{" + G2 + ', "n_head": true}',
    "gpus_2^53.toml": 'base = "a100-80gb-x8"\ngpus = 9007199254740993\n',
    "gpus_bool.toml": 'base = "a100-80gb-x8"\ngpus = true\n',
    "gpus_zero.toml": 'base = "a100-80gb-x8"\ngpus = 0\n',
    "mem_1e400.toml": 'base = "a100-80gb-x8"\nmemory_gib = 1e400\n',
    "mem_1e300.toml": 'base = "a100-80gb-x8"\nmemory_gib = 1e300\n',
    "tflops_1e308.toml": 'base = "a100-80gb-x8"\npeak_tflops = 1e308\n',
    "mem_string.toml": 'base = "a100-80gb-x8"\nmemory_gib = "80"\n',
    "mem_bool.toml": 'base = "a100-80gb-x8"\nmemory_gib = true\n',
    "bw_1e400.toml": 'base = "a100-80gb-x8"\n[busbw_gbps]\np2p = 1e400\n',
    "alpha_bool.toml": 'base = "a100-80gb-x8"\n[alpha_us]\np2p = true\n',
    "base_int.toml": "base = 5\n",
    "lens_1e400.txt": "512\n1e400\n",
    "lens_2^53.txt": "512\n9007199254740993\n",
    "lens_neg.txt": "512\n-5\n",
    "lens_zero.txt": "0\n",
    "lens_frac.txt": "12.5\n",
    "lens_empty.txt": "",
    "lens_word.txt": "many\n",
    "tok_float.jsonl": "[1.5, 2]\n",
    "tok_neg.jsonl": "[-1, 2, 3]\n",
    "tok_str.jsonl": '["a", "b"]\n',
    "tok_bool.jsonl": "[true, false]\n",
    "tok_1e400.jsonl": "[1e400, 2]\n",
    "tok_obj.jsonl": '{"a": 1}\n',
    "tok_empty.jsonl": "[]\n",
    "nodes_1e300.toml": 'base = "a100-80gb-x8"\nnodes = 1e300\n',
    "nodes_2^53.toml": 'base = "a100-80gb-x8"\nnodes = 9007199254740993\n',
    "gpus_per_node_2^53.toml": 'base = "a100-80gb-x8"\nnodes = 2\ngpus_per_node = 9007199254740993\n',
    "gpus_2^21.toml": 'base = "a100-80gb-x8"\nnodes = 2\ngpus_per_node = 8\ngpus = 2097152\n',
    "host_mem_neg.toml": 'base = "a100-80gb-x8"\nhost_memory_gib = -5\n',
    "inter_latency_neg.toml": 'base = "a100-80gb-x8"\ninter_node_latency_us = -5\n',
    "curve_string.toml": 'base = "a100-80gb-x8"\ngemm_efficiency = [[1, "0.5"]]\n',
    "lens_arabic.txt": "\u0665\u0661\u0662\n",
    "lens_underscore.txt": "1_000\n",
    "tok_deep.jsonl": "[" * 100000 + "]" * 100000 + "\n",
    "text_deep.jsonl": "[" * 100000 + "]" * 100000 + "\n",
    "tok_digits.jsonl": "[" + "9" * 5000 + "]\n",
    "cfg_digits.json": "{" + G2 + ', "n_layer": ' + "9" * 5000 + "}",
    "cfg_deep.json": "[" * 100000 + "]" * 100000,
    "initdeep/config.json": "[" * 100000 + "]" * 100000,
    "initdigits/config.json": '{"n_layer": ' + "9" * 5000 + "}",
    "p_digits.json": '{"layers": ' + "9" * 5000 + "}",
    "mem_neg_zero.toml": 'base = "a100-80gb-x8"\nmemory_gib = -0.0\n',
    "mem_tiny.toml": 'base = "a100-80gb-x8"\nmemory_gib = 1e-300\n',
    "hbm_zero.toml": 'base = "a100-80gb-x8"\nhbm_gbps = 0\n',
    "mem_date.toml": 'base = "a100-80gb-x8"\nmemory_gib = 1979-05-27\n',
}
"""Malformed config.json, cluster TOML, length and token files of the sweep cases (SWEEP_CASES)."""


def make_fixtures(root: Path) -> None:
    """Write every malformed input file under `root`."""
    files = {
        "bw_string.toml": 'base = "a100-80gb-x8"\n[busbw_gbps]\nall_gather = "fast"\n',
        "bw_zero.toml": 'base = "a100-80gb-x8"\n[busbw_gbps]\np2p = 0\n',
        "gpus_16_no_nodes.toml": 'base = "a100-80gb-x8"\ngpus = 16\n',
        "nodes_no_link.toml": 'base = "a100-80gb-x8"\nnodes = 2\ninter_node_bandwidth_gbps = 0\n',
        "mem_inf.toml": 'base = "a100-80gb-x8"\nmemory_gib = inf\n',
        "reserve_all.toml": 'base = "a100-80gb-x8"\nmemory_gib = 8\nreserve_gib = 8\n',
        "mem_nan.toml": 'base = "a100-80gb-x8"\nmemory_gib = nan\n',
        "gpus_frac.toml": 'base = "a100-80gb-x8"\ngpus = 8.7\n',
        "latency_neg.toml": 'base = "a100-80gb-x8"\nalpha_base_us = -1.0\n',
        "curve_bad.toml": 'base = "a100-80gb-x8"\ngemm_efficiency = [[1, 2, 3]]\n',
        "p_huge.json": _problem(kept_bytes=[[2**64, 2], [1, 2]]),
        "p_overflow.json": _problem(fixed_bytes=2**62, budget_bytes=2**63 - 1, kept_bytes=[[2**62, 2**62], [2**62, 1]]),
        "p_inf.json": _problem(time_s=[[1e308, 1e308], [1e308, 1e308]]),
        "p_time_bigint.json": _problem(time_s=[[10**400, 1.0], [1.0, 1.0]]),
        "p_fixed_time_bigint.json": _problem(fixed_time_s=10**400),
        "p_switch_null.json": _problem(switch_s=None),
        "p_nan.json": _problem(time_s=[[float("nan"), 1.0], [1.0, 1.0]]).replace("NaN", "NaN"),
        "p_nested.json": "[" * 100000 + "]" * 100000,
        "p_empty.json": "",
        "p_list.json": "[1, 2]",
        "p_neg_budget.json": _problem(budget_bytes=-5),
        "lens_ok.txt": "512\n1024\n",
        "badcal/calibrate.json": "{garbage",
        "listcal/calibrate.json": "[1, 2]",
        "model_bad.json": '{"n_layer": "many"}',
        "model_empty.json": "",
        "prof_garbage.csv": "a,b\n1,2\n",
        "garbage.joblib": "this is not a pickle",
        "empty.joblib": "",
        "tokens.jsonl": "[1, 2, 3]\n",
        "tokens_bad.jsonl": "{not json\n",
    }
    for name, text in {**files, **SWEEP_FILES}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "self_base.toml").write_text(f'base = "{root / "self_base.toml"}"\n')
    (root / "latin1.toml").write_bytes(b'name = "\xff\xfe"\n')
    (root / "latin1.json").write_bytes(b'{"layers": "\xff"}')
    (root / "latin1.txt").write_bytes(b"512\n\xff\xfe\n")
    _make_text_fixtures(root)
    (root / "dir.toml").mkdir(exist_ok=True)
    (root / "dir.json").mkdir(exist_ok=True)
    (root / "dir.txt").mkdir(exist_ok=True)
    (root / "dir.joblib").mkdir(exist_ok=True)
    (root / "texts").mkdir(exist_ok=True)
    (root / "texts" / "a.txt").write_text("hello world\n")
    (root / "afile").write_text("x")
    trunc = root / "truncated.joblib"
    import joblib

    joblib.dump({"x": list(range(1000))}, trunc)
    trunc.write_bytes(trunc.read_bytes()[:40])
    # a checkpoint folder whose only checkpoint is damaged
    ck = root / "ckpt_bad" / "step-000002"
    ck.mkdir(parents=True, exist_ok=True)
    (ck / "meta.json").write_text("{broken")
    (ck / "rank-0.pt").write_bytes(b"garbage")
    (root / "ckpt_bad" / "latest").write_text("step-000002")


def _make_text_fixtures(root: Path) -> None:
    """Text datasets, token files and tokenizers, good and not: a word-level tokenizer (tokenizers' WordLevel, no
    training), text and token files that are not UTF-8, tokenizer files that are not JSON or not UTF-8."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "the": 1, "cat": 2, "sat": 3}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    (root / "tok").mkdir(exist_ok=True)
    tokenizer.save(str(root / "tok" / "tokenizer.json"))
    (root / "text_ok.jsonl").write_text('{"text": "the cat sat"}\n{"text": "the cat"}\n')
    (root / "text_latin1.jsonl").write_bytes(b'{"text": "caf\xe9 au lait"}\n')  # Latin-1, not UTF-8
    (root / "tok_latin1.jsonl").write_bytes(b"[1, 2]\n[\xff]\n")
    (root / "tokenizer_garbage.json").write_text("{not json")
    (root / "tokenizer_latin1.json").write_bytes(b"\xff\xfe{}")


TRAIN = ["train", "--model", "gpt2-tiny", "--dataset", "uniform:8:16", "--steps", "1", "--no-progress"]
TEXT_TRAIN = ["train", "--model", "gpt2-tiny", "--tokenizer", "{d}/tok", "--steps", "1", "--no-progress"]
SOLVE = ["solve", "--solver", "dp", "--problem"]
COST = ["cost", "--model", "gpt", "--seq", "4096", "--cluster"]
SIM_DP = ["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "dynamic:dp"]

CASES: list[tuple[str, list[str]]] = [
    # argparse itself: unknown command, option, missing required, bad type
    ("no-command", []),
    ("unknown-command", ["frobnicate"]),
    ("unknown-option", ["models", "--colour"]),
    ("missing-required", ["cost", "--model", "gpt"]),
    ("int-type", ["workload", "grch38", "--size", "many"]),
    ("bad-choice", ["lengths", "{d}/texts", "--out", "{d}/x.txt", "--tokenizer", "bpe"]),
    # cost / plan / compare-solvers
    ("cost-seq-huge", ["cost", "--model", "gpt", "--seq", "1e26"]),
    ("cost-seq-inf", ["cost", "--model", "gpt", "--seq", "inf"]),
    ("cost-seq-nan", ["cost", "--model", "gpt", "--seq", "nan"]),
    ("cost-seq-empty", ["cost", "--model", "gpt", "--seq", ""]),
    ("cost-batch-0", ["cost", "--model", "gpt", "--seq", "4096", "--batch", "0"]),
    ("cost-model-file-bad", ["cost", "--model", "{d}/model_bad.json", "--seq", "4096"]),
    ("cost-model-file-empty", ["cost", "--model", "{d}/model_empty.json", "--seq", "4096"]),
    ("cost-model-dir", ["cost", "--model", "{d}/dir.json", "--seq", "4096"]),
    ("plan-budget-huge", ["plan", "--model", "gpt", "--seq", "4096", "--budget-gb", "1e30"]),
    ("plan-budget-nan", ["plan", "--model", "gpt", "--seq", "4096", "--budget-gb", "nan"]),
    ("plan-seq-huge", ["plan", "--model", "gpt", "--seq", "1e26"]),
    ("plan-solver", ["plan", "--model", "gpt", "--seq", "4096", "--solver", "magic"]),
    ("plan-static-unknown", ["plan", "--model", "gpt", "--seq", "4096", "--solver", "static:zero"]),
    ("plan-reserve-negative", ["plan", "--model", "gpt", "--seq", "4096", "--reserve-gb", "-1"]),
    ("plan-reserve-all", ["plan", "--model", "gpt", "--seq", "4096", "--cluster", "{d}/reserve_all.toml"]),
    ("plan-head", ["plan", "--model", "gpt", "--seq", "4096", "--head", "magic"]),
    ("plan-max-length-and-seq", ["plan", "--model", "gpt", "--seq", "4096", "--max-length"]),
    ("plan-max-length-nothing-fits", ["plan", "--model", "llama3-70b", "--cluster", "h100-80gb-x8", "--max-length"]),
    ("compare-seqs-empty", ["compare-solvers", "--model", "gpt", "--seqs", ","]),
    ("compare-seqs-huge", ["compare-solvers", "--model", "gpt", "--seqs", "4096,1e26"]),
    # cluster TOML
    ("toml-bw-string", COST + ["{d}/bw_string.toml"]),
    ("toml-bw-zero", COST + ["{d}/bw_zero.toml"]),
    ("toml-gpus-16-without-nodes", COST + ["{d}/gpus_16_no_nodes.toml"]),
    ("toml-nodes-without-link", COST + ["{d}/nodes_no_link.toml"]),
    ("simulate-gpus-not-whole-nodes", SIM_DP + ["--gpus", "12"]),
    ("simulate-groups-without-batch", SIM_DP + ["--groups", "sized"]),
    ("simulate-runnable-groups-without-batch", SIM_DP + ["--runnable-groups"]),
    ("simulate-global-batch-0", SIM_DP + ["--global-batch", "0"]),
    ("simulate-global-batch-tokens-neg", SIM_DP + ["--global-batch-tokens", "-5"]),
    ("simulate-global-batch-both", SIM_DP + ["--global-batch", "4", "--global-batch-tokens", "100"]),
    ("simulate-groups-unknown", SIM_DP + ["--global-batch", "4", "--groups", "magic"]),
    ("simulate-groups-dcp-with-dynamic", SIM_DP + ["--global-batch", "4", "--groups", "dynamic-cp"]),
    ("simulate-groups-sized-with-static", ["simulate", "--model", "gpt", "--dataset", "grch38", "--policy",
                                           "static:metp", "--global-batch", "4", "--groups", "sized"]),
    ("simulate-groups-exact-too-large", SIM_DP + ["--global-batch", "64", "--groups", "sized-exact"]),
    ("simulate-groups-gpus-not-power-of-two", SIM_DP + ["--global-batch", "4", "--gpus", "6"]),
    ("simulate-groups-packing-0", SIM_DP + ["--global-batch", "4", "--pack-tokens", "0"]),
    ("simulate-groups-paper-truth", SIM_DP + ["--global-batch", "4", "--truth-cost-model", "paper"]),
    ("toml-mem-inf", COST + ["{d}/mem_inf.toml"]),
    ("toml-mem-nan", COST + ["{d}/mem_nan.toml"]),
    ("toml-gpus-frac", COST + ["{d}/gpus_frac.toml"]),
    ("toml-latency-neg", COST + ["{d}/latency_neg.toml"]),
    ("toml-curve", COST + ["{d}/curve_bad.toml"]),
    ("toml-self-base", COST + ["{d}/self_base.toml"]),
    ("toml-latin1", COST + ["{d}/latin1.toml"]),
    ("toml-dir", COST + ["{d}/dir.toml"]),
    ("toml-missing", COST + ["{d}/missing.toml"]),
    # solve
    ("solve-bytes-2^64", SOLVE + ["{d}/p_huge.json"]),
    ("solve-fixed-budget-overflow", SOLVE + ["{d}/p_overflow.json"]),
    ("solve-times-inf", SOLVE + ["{d}/p_inf.json"]),
    ("solve-time-10^400", SOLVE + ["{d}/p_time_bigint.json"]),
    ("solve-fixed-time-10^400", SOLVE + ["{d}/p_fixed_time_bigint.json"]),
    ("solve-switch-null", SOLVE + ["{d}/p_switch_null.json"]),
    ("solve-time-nan", SOLVE + ["{d}/p_nan.json"]),
    ("solve-nested", SOLVE + ["{d}/p_nested.json"]),
    ("solve-empty", SOLVE + ["{d}/p_empty.json"]),
    ("solve-list", SOLVE + ["{d}/p_list.json"]),
    ("solve-neg-budget", SOLVE + ["{d}/p_neg_budget.json"]),
    ("solve-latin1", SOLVE + ["{d}/latin1.json"]),
    ("solve-dir", SOLVE + ["{d}/dir.json"]),
    ("solve-missing", SOLVE + ["{d}/missing.json"]),
    ("solve-solver", ["solve", "--solver", "magic", "--problem", "{d}/p_list.json"]),
    # workload / lengths
    ("workload-size-huge", ["workload", "uniform", "--size", "1000000000000"]),
    ("workload-seed-neg", ["workload", "grch38", "--seed", "-1"]),
    ("workload-uniform-inf", ["workload", "uniform:1:inf"]),
    ("workload-lognormal-nan", ["workload", "lognormal:1000:nan"]),
    ("workload-lognormal-inf", ["workload", "lognormal:inf:1"]),
    ("workload-unknown", ["workload", "zipf:1"]),
    ("workload-file-latin1", ["workload", "file:{d}/latin1.txt"]),
    ("workload-file-dir", ["workload", "file:{d}/dir.txt"]),
    ("cost-seq-and-documents", ["cost", "--model", "gpt", "--seq", "4K", "--documents", "4K"]),
    ("cost-documents-word", ["cost", "--model", "gpt", "--documents", "4K,many"]),
    ("cost-documents-batch", ["cost", "--model", "gpt", "--documents", "4K,2K", "--batch", "2"]),
    ("plan-documents-empty", ["plan", "--model", "gpt", "--documents", ","]),
    ("workload-pack-tokens-0", ["workload", "grch38", "--pack-tokens", "0"]),
    ("workload-p-0", ["workload", "grch38", "--pack-tokens", "4096", "--p", "0"]),
    ("workload-pack-order", ["workload", "grch38", "--pack-tokens", "4096", "--pack-order", "random"]),
    ("workload-sampling", ["workload", "grch38", "--sampling", "poisson"]),
    ("simulate-sampling", ["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "static:metp",
                           "--sampling", "poisson"]),
    ("experiment-sampling", ["experiment", "fig2", "--size", "2", "--out", "{d}/sampling", "--sampling", "x"]),
    ("reproduce-sampling", ["reproduce", "--quick", "--out", "{d}/sampling", "--sampling", "x"]),
    ("lengths-pack-tokens-neg", ["lengths", "{d}/texts", "--out", "{d}/x.txt", "--pack-tokens", "-5"]),
    ("lengths-not-dir", ["lengths", "{d}/afile", "--out", "{d}/x.txt"]),
    ("lengths-out-is-dir", ["lengths", "{d}/texts", "--out", "{d}/dir.txt"]),
    ("lengths-out-under-file", ["lengths", "{d}/texts", "--out", "{d}/afile/x.txt"]),
    # simulate / experiment
    ("simulate-policy", ["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "magic"]),
    ("simulate-size-0", ["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "static:metp",
                         "--size", "0"]),
    ("simulate-seed-neg", ["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "static:metp",
                           "--seed", "-1"]),
    ("simulate-joblib-garbage", SIM_DP + ["--plan-cost-model", "{d}/garbage.joblib"]),
    ("simulate-joblib-empty", SIM_DP + ["--plan-cost-model", "{d}/empty.joblib"]),
    ("simulate-joblib-truncated", SIM_DP + ["--truth-cost-model", "{d}/truncated.joblib"]),
    ("simulate-joblib-dir", SIM_DP + ["--plan-cost-model", "{d}/dir.joblib"]),
    ("simulate-out-is-dir", ["simulate", "--model", "gpt", "--dataset", "uniform", "--size", "2", "--policy",
                             "static:metp", "--out", "{d}/dir.txt"]),
    ("simulate-gamma", ["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "static:metp",
                        "--gamma", "nan"]),
    ("experiment-out-is-file", ["experiment", "fig2", "--size", "2", "--out", "{d}/afile"]),
    ("experiment-size-neg", ["experiment", "table5", "--size", "-3", "--out", "{d}/exp"]),
    # cost-model commands
    ("ablate-profiles-garbage", ["ablate-costmodel", "--profiles", "{d}/prof_garbage.csv", "--no-regret"]),
    ("ablate-profiles-dir", ["ablate-costmodel", "--profiles", "{d}/dir.txt", "--no-regret"]),
    ("fit-kind", ["fit-costmodel", "--kind", "magic", "--out", "{d}/m.joblib"]),
    ("fit-out-is-dir", ["fit-costmodel", "--kind", "polynomial", "--out", "{d}/dir.joblib"]),
    ("synth-out-is-dir", ["synth-profile", "--out", "{d}/dir.txt", "--models", "bert", "--ratio", "2"]),
    ("synth-ratio", ["synth-profile", "--out", "{d}/s.csv", "--ratio", "1.0"]),
    ("synth-noise-nan", ["synth-profile", "--out", "{d}/s.csv", "--time-noise", "nan"]),
    ("bench-sizes", ["bench-solvers", "--sizes", "0"]),
    ("paper-profile-out-is-dir", ["paper-profile", "--out", "{d}/dir.txt"]),
    ("paper-profile-ratio", ["paper-profile", "--out", "{d}/pp.csv", "--ratio", "nan"]),
    ("fit-calibration-profiles", ["fit-calibration", "--profiles", "{d}/prof_garbage.csv", "--out", "{d}/c.toml"]),
    ("fit-calibration-out-is-dir", ["fit-calibration", "--out", "{d}/dir.toml"]),
    # reproduce
    ("reproduce-out-is-file", ["reproduce", "--quick", "--out", "{d}/afile"]),
    ("reproduce-cluster", ["reproduce", "--quick", "--cluster", "tpu", "--out", "{d}/rep"]),
    # catalog and profile
    ("models-format", ["models", "--format", "xml"]),
    ("clusters-format", ["clusters", "--format", "yaml"]),
    ("strategies-extra", ["strategies", "metp"]),
    ("profile-model", ["profile", "--model", "nope", "--seqs", "512", "--strategies", "metp", "--out", "{d}/p.csv"]),
    ("profile-seqs", ["profile", "--model", "gpt2-tiny", "--seqs", "0", "--strategies", "metp", "--out",
                      "{d}/p.csv"]),
    ("profile-strategy", ["profile", "--model", "gpt2-tiny", "--seqs", "512", "--strategies", "zero", "--out",
                          "{d}/p.csv"]),
    # calibrate and validate-run (checked before any rank starts)
    ("calibrate-model", ["calibrate", "--out", "{d}/cal", "--model", "nope"]),
    ("calibrate-not-gpt2", ["calibrate", "--out", "{d}/cal", "--model", "llama"]),
    ("calibrate-budget", ["calibrate", "--out", "{d}/cal", "--budget-s", "nan"]),
    ("calibrate-heads", ["calibrate", "--out", "{d}/cal", "--model", "gpt2-tiny", "--nproc", "5"]),
    ("calibrate-out-is-file", ["calibrate", "--out", "{d}/afile", "--model", "gpt2-tiny"]),
    ("calibrate-out-under-file", ["calibrate", "--out", "{d}/afile/cal", "--model", "gpt2-tiny"]),
    ("validate-run-cost-model", ["validate-run", "--out", "{d}/val", "--cost-model", "magic"]),
    ("validate-run-policies", ["validate-run", "--out", "{d}/val", "--policies", "fastest"]),
    ("validate-run-steps", ["validate-run", "--out", "{d}/val", "--steps", "0"]),
    ("validate-run-damaged-calibrate-json", ["validate-run", "--out", "{d}/badcal"]),
    ("validate-run-calibrate-json-list", ["validate-run", "--out", "{d}/listcal"]),
    ("validate-run-skip", ["validate-run", "--out", "{d}/val", "--steps", "2", "--skip-steps", "2"]),
    ("validate-run-out-is-file", ["validate-run", "--out", "{d}/afile"]),
    ("validate-run-cluster", ["validate-run", "--out", "{d}/val", "--cluster", "tpu"]),
    # train (in process, --nproc 1)
    ("train-model", ["train", "--model", "nope", "--dataset", "uniform:8:16", "--steps", "1"]),
    ("train-dataset", ["train", "--model", "gpt2-tiny", "--dataset", "zipf", "--steps", "1"]),
    ("train-policy", TRAIN + ["--policy", "magic"]),
    ("train-group-size-3", TRAIN + ["--global-batch", "4", "--group-size", "3"]),
    ("train-group-size-alone", TRAIN + ["--group-size", "2"]),
    ("train-global-batch-negative", TRAIN + ["--global-batch", "-1"]),
    ("train-global-batch-and-accumulate", TRAIN + ["--global-batch", "4", "--accumulate", "2"]),
    ("train-cluster", TRAIN + ["--cluster", "tpu"]),
    ("train-cost-model", TRAIN + ["--cost-model", "magic"]),
    ("train-lr-nan", TRAIN + ["--lr", "nan"]),
    ("train-lr-neg", TRAIN + ["--lr", "-1"]),
    ("train-max-len-neg", TRAIN + ["--max-len", "-1"]),
    ("train-nproc-0", TRAIN + ["--nproc", "0"]),
    ("train-nproc-neg", TRAIN + ["--nproc", "-2"]),
    ("train-seed-neg", TRAIN + ["--seed", "-1"]),
    ("train-budget-nan", TRAIN + ["--budget-gb", "nan"]),
    ("train-every-neg", TRAIN + ["--checkpoint-every", "-1"]),
    ("train-pack-tokens-neg", TRAIN + ["--pack-tokens", "-4"]),
    ("train-pack-tokens-0", TRAIN + ["--pack-tokens", "0"]),  # as simulate, workload and lengths: positive when given
    ("train-pack-order", TRAIN + ["--pack-tokens", "64", "--pack-order", "random"]),
    ("train-pack-batch", TRAIN + ["--pack-tokens", "64", "--batch", "2"]),
    ("train-tokens-bad", ["train", "--model", "gpt2-tiny", "--dataset", "file:{d}/tokens_bad.jsonl", "--steps", "1"]),
    ("train-log-file-dir", TRAIN + ["--log-file", "{d}/dir.txt"]),
    ("train-log-file-under-file", TRAIN + ["--log-file", "{d}/afile/log.csv"]),
    ("train-ckpt-dir-is-file", TRAIN + ["--checkpoint-dir", "{d}/afile"]),
    ("train-resume-damaged", TRAIN + ["--checkpoint-dir", "{d}/ckpt_bad", "--resume"]),
    ("train-init-from-missing", ["train", "--init-from", "{d}/nothing", "--dataset", "uniform:8:16", "--steps", "1"]),
    ("train-init-from-no-weights", TRAIN[:1] + ["--init-from", "{d}"] + TRAIN[3:]),  # {d} has no config.json
    # export-hf
    ("export-hf-no-checkpoint", ["export-hf", "--checkpoint", "{d}/nothing", "--out", "{d}/hf1"]),
    ("export-hf-damaged", ["export-hf", "--checkpoint", "{d}/ckpt_bad", "--out", "{d}/hf2"]),
    ("export-hf-out-is-file", ["export-hf", "--checkpoint", "{d}/ckpt_bad", "--out", "{d}/afile"]),
    ("export-hf-shard-size", ["export-hf", "--checkpoint", "{d}/ckpt_bad", "--out", "{d}/hf3",
                              "--max-shard-size", "0"]),
]

NPROC2_CASES: list[tuple[str, list[str]]] = [
    ("nproc2-model", ["--nproc", "2", "--model", "nope", "--dataset", "uniform:8:16", "--steps", "1"]),
    ("nproc2-lr-nan", ["--nproc", "2", "--model", "gpt2-tiny", "--dataset", "uniform:8:16", "--steps", "1",
                       "--lr", "nan", "--no-progress"]),
    ("nproc2-policy", ["--nproc", "2", "--model", "gpt2-tiny", "--dataset", "uniform:8:16", "--steps", "1",
                       "--policy", "static:zero", "--no-progress"]),
    ("nproc2-group-size-4", ["--nproc", "2", "--model", "gpt2-tiny", "--dataset", "uniform:8:16", "--steps", "1",
                             "--global-batch", "2", "--group-size", "4", "--no-progress"]),
    ("nproc2-cluster", ["--nproc", "2", "--model", "gpt2-tiny", "--dataset", "uniform:8:16", "--steps", "1",
                        "--cluster", "{d}/mem_nan.toml", "--no-progress"]),
    # replay cost model
    ("ablate-replay-no-tables", ["ablate-costmodel", "--cost-models", "replay", "--cluster", "a100-80gb-x8",
                                 "--no-regret"]),
    ("ablate-replay-unknown", ["ablate-costmodel", "--cost-models", "replayed", "--no-regret"]),
]

TORCHRUN = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29511"}
"""torchrun's variables for rank 0 of 2 (a peer that never comes: without a check, rank 0 waits forever)."""
ONE_RANK = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511"}

ENV_CASES: list[tuple[str, dict[str, str], list[str]]] = [
    # (id, environment variables set for the case (torchrun's others unset), argv)
    ("env-torchrun-and-nproc-2", TORCHRUN, TRAIN + ["--nproc", "2"]),
    ("env-torchrun-and-nproc-1", TORCHRUN, TRAIN + ["--nproc", "1"]),
    ("env-master-addr-and-nproc-2", {"MASTER_ADDR": "10.0.0.1"}, TRAIN + ["--nproc", "2"]),
    ("env-torchrun-calibrate-nproc", TORCHRUN, ["calibrate", "--out", "{d}/cal", "--model", "gpt2-tiny",
                                                "--nproc", "2"]),
    ("env-torchrun-validate-run-nproc", TORCHRUN, ["validate-run", "--out", "{d}/val", "--nproc", "2"]),
    ("env-rank-word", {**TORCHRUN, "RANK": "abc"}, TRAIN),
    ("env-rank-too-big", {**TORCHRUN, "RANK": "2"}, TRAIN),
    ("env-rank-negative", {**TORCHRUN, "RANK": "-1"}, TRAIN),
    ("env-rank-float", {**TORCHRUN, "RANK": "0.0"}, TRAIN),
    ("env-world-0", {**TORCHRUN, "WORLD_SIZE": "0"}, TRAIN),
    ("env-world-exponent", {**TORCHRUN, "WORLD_SIZE": "2e0"}, TRAIN),
    ("env-world-above-2^53", {**TORCHRUN, "WORLD_SIZE": "9007199254740993"}, TRAIN),
    ("env-world-empty", {**TORCHRUN, "WORLD_SIZE": ""}, TRAIN),
    ("env-rank-without-world", {"RANK": "0"}, TRAIN),
    ("env-world-without-rank", {"WORLD_SIZE": "2"}, TRAIN),
    ("env-no-master-addr", {"RANK": "0", "WORLD_SIZE": "1"}, TRAIN),
    ("env-master-port-huge", {**ONE_RANK, "MASTER_PORT": "99999"}, TRAIN),
    ("env-master-port-word", {**ONE_RANK, "MASTER_PORT": "http"}, TRAIN),
    ("env-local-rank-word", {**ONE_RANK, "LOCAL_RANK": "first"}, TRAIN),
    ("env-local-rank-beyond-local-world", {**TORCHRUN, "LOCAL_RANK": "2"}, TRAIN),
    ("env-rank-word-calibrate", {**TORCHRUN, "RANK": "x"}, ["calibrate", "--out", "{d}/cal", "--model", "gpt2-tiny"]),
    ("env-rank-word-validate-run", {**TORCHRUN, "RANK": "x"}, ["validate-run", "--out", "{d}/val"]),
    ("env-rank-word-profile-distributed", {**TORCHRUN, "RANK": "abc"},
     ["profile", "--model", "gpt2-tiny", "--seqs", "64", "--strategies", "metp", "--out", "{d}/p.csv", "--mode",
      "distributed"]),
    ("env-group-rank-word", {**TORCHRUN, "GROUP_RANK": "x"}, TRAIN),
    ("env-group-rank-beyond-world", {**TORCHRUN, "GROUP_RANK": "2"}, TRAIN),
    ("env-no-master-profile-distributed", {"RANK": "0", "WORLD_SIZE": "1"},
     ["profile", "--model", "gpt2-tiny", "--seqs", "64", "--strategies", "metp", "--out", "{d}/p.csv", "--mode",
      "distributed"]),
]


BIG = "9007199254740993"
"""2**53 + 1: a float cannot hold it (it reads back as ...992), so it must be parsed as an integer."""
COST_M = ["cost", "--seq", "64", "--model"]

SIM_METP = ["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "static:metp"]
PROFILE = ["profile", "--model", "gpt2-tiny", "--strategies", "metp", "--out", "{d}/p.csv", "--p", "2"]
HUGE = "1" + "0" * 21
"""10**21: an integer flag far beyond any sensible count (a model of that many layers, repeats forever)."""

NUMBER_CASES: list[tuple[str, list[str], str]] = [
    # negative numbers in any float notation are values, not a missing argument ('expected one argument')
    ("simulate-gamma-negative-exponent", SIM_METP + ["--gamma", "-1e-3"], "--gamma must be in [0, 1), got -1e-3"),
    ("simulate-gamma-minus-1e400", SIM_METP + ["--gamma", "-1e400"], "--gamma must be in [0, 1), got -1e400"),
    ("train-lr-negative-exponent", TRAIN + ["--lr", "-1e-3"],
     "--lr must be a finite number > 0 and <= 1000, got -1e-3"),
    ("train-clip-grad-minus-inf", TRAIN + ["--clip-grad", "-inf"], "--clip-grad must be a finite number >= 0"),
    ("plan-reserve-gib-minus-nan", ["plan", "--model", "gpt", "--seq", "4096", "--reserve-gib", "-nan"], "got -nan"),
    ("synth-time-noise-minus-1e400", ["synth-profile", "--out", "{d}/s.csv", "--time-noise", "-1e400"], "got -1e400"),
    # integers shown as given (no thousands separators) and bounded before any arithmetic
    ("cost-gpus-above-2^53-as-typed", ["cost", "--model", "gpt", "--seq", "4096", "--gpus", BIG],
     "--gpus must be at most 4,096, got " + BIG),
    ("synth-seed-negative", ["synth-profile", "--out", "{d}/s.csv", "--seed", "-1"],
     "--seed must be an integer from 0 to 2**63 - 1, got -1"),
    ("synth-p-above-2^53", ["synth-profile", "--out", "{d}/s.csv", "--p", BIG],
     "--p must be at most 4,096, got " + BIG),
    ("lengths-seed-negative-shuffled", ["lengths", "{d}/texts", "--out", "{d}/y.txt", "--pack-tokens", "100",
                                        "--pack-order", "shuffled", "--seed", "-1"],
     "--seed must be an integer from 0 to 2**63 - 1, got -1"),
    ("workload-p-above-2^53", ["workload", "grch38", "--pack-tokens", "65536", "--p", BIG],
     "--p must be at most 4,096, got " + BIG),
    ("experiment-global-batch-negative-fig2", ["experiment", "fig2", "--global-batch", "-1", "--out", "{d}/exp"],
     "--global-batch must be a positive integer, got -1"),
    ("experiment-global-batch-above-2^53-table5", ["experiment", "table5", "--global-batch", BIG, "--out",
                                                   "{d}/exp"], "--global-batch must be at most 1,048,576, got " + BIG),
    ("bench-ilp-time-limit-1e400", ["bench-solvers", "--ilp-time-limit", "1e400"],
     "--ilp-time-limit must be a positive number of seconds, got '1e400'"),
    ("train-nproc-above-2^53", TRAIN + ["--nproc", BIG], "--nproc must be at most 4,096, got " + BIG),
    ("calibrate-nproc-above-2^53", ["calibrate", "--out", "{d}/cal", "--model", "gpt2-tiny", "--nproc", BIG],
     "--nproc must be at most 4,096, got " + BIG),
    ("calibrate-repeats-10^21", ["calibrate", "--out", "{d}/cal", "--model", "gpt2-tiny", "--repeats", HUGE],
     "--repeats must be at most 10,000, got " + HUGE),
    ("calibrate-lengths-10^21", ["calibrate", "--out", "{d}/cal", "--model", "gpt2-tiny", "--lengths", HUGE],
     "--lengths must be at most 1,024, got " + HUGE),
    ("calibrate-warmup-10^21", ["calibrate", "--out", "{d}/cal", "--model", "gpt2-tiny", "--warmup", HUGE],
     "--warmup must be an integer in [0, 10,000], got " + HUGE),
    ("validate-run-steps-10^8", ["validate-run", "--out", "{d}/val", "--steps", "100000000"],
     "--steps must be at most 10,000,000, got 100000000"),
    ("validate-run-max-len-beyond-model", ["validate-run", "--out", "{d}/val", "--max-len", "99999"],
     "--max-len must be at most"),
    ("validate-run-repeats-10^21", ["validate-run", "--out", "{d}/val", "--repeats", HUGE],
     "--repeats must be at most 10,000, got " + HUGE),
    ("profile-layers-10^21", PROFILE + ["--seqs", "64", "--layers", HUGE],
     "--layers must be an integer in [0, 65,536], got " + HUGE),
    ("profile-repeats-10^21", PROFILE + ["--seqs", "64", "--repeats", HUGE],
     "--repeats must be an integer in [1, 10,000], got " + HUGE),
    ("profile-batch-10^21", PROFILE + ["--seqs", "64", "--batch", HUGE],
     "--batch must be an integer in [1, 1,048,576], got " + HUGE),
    ("profile-seqs-above-2^40", PROFILE + ["--seqs", "9007199254740996"],
     "--seqs must be at most 1,099,511,627,776, got 9007199254740996"),
    ("profile-seed-negative", PROFILE + ["--seqs", "64", "--seed", "-1"], "--seed must be an integer from 0"),
    # cluster TOML: counts bounded before nodes x gpus_per_node, values shown as written (not bytes or seconds)
    ("toml-nodes-1e300", COST + ["{d}/nodes_1e300.toml"], "nodes must be a whole number up to 1,048,576, got 1e300"),
    ("toml-nodes-above-2^53", COST + ["{d}/nodes_2^53.toml"],
     "nodes must be a whole number up to 1,048,576, got " + BIG),
    ("toml-gpus-per-node-above-2^53", COST + ["{d}/gpus_per_node_2^53.toml"],
     "gpus_per_node must be a whole number up to 1,048,576, got " + BIG),
    ("toml-gpus-2^21-bound-of-a-cluster", COST + ["{d}/gpus_2^21.toml"],
     "gpus must be a whole number up to 1,048,576, got 2097152"),
    ("toml-host-memory-negative", COST + ["{d}/host_mem_neg.toml"],
     "host_mem_neg.toml: host_memory_gib must be a finite number >= 0, got -5"),  # not -5368709120 (bytes)
    ("toml-inter-node-latency-negative", COST + ["{d}/inter_latency_neg.toml"],
     "inter_latency_neg.toml: inter_node_latency_us must be a finite number >= 0, got -5"),
    ("toml-curve-point-string", COST + ["{d}/curve_string.toml"], "gemm_efficiency must be an array of [x, fraction]"),
    # length files: ASCII digits only (Decimal would read these as 512 and 1000)
    ("lengths-arabic-indic-digits", ["workload", "file:{d}/lens_arabic.txt"], "got \u0665\u0661\u0662"),
    ("lengths-underscore", ["workload", "file:{d}/lens_underscore.txt"], "got 1_000"),
    # an output folder that takes no new file: the output is named, not the temporary file beside it
    ("simulate-out-in-proc", SIM_METP + ["--out", "/proc/version"], "cannot use '/proc/version'"),
]
"""Number, bound, TOML, length-file and output-path cases (part of SWEEP_CASES)."""

INT_FLAG = "invalid integer value: "
NUMBER_FLAG = "invalid number value: "
SYNTAX_CASES: list[tuple[str, list[str], str]] = [
    # integer and float flags in ASCII digits only: int() and float() also read '1_000', other scripts' digits,
    # '+3', '007' and '-0', as numbers other than the one a later message would show
    ("workload-size-underscore", ["workload", "grch38", "--size", "1_000"], INT_FLAG + "'1_000'"),
    ("simulate-seed-arabic-indic", SIM_METP + ["--seed", "\u0663"], INT_FLAG + "'\u0663'"),
    ("train-steps-plus-sign", TRAIN + ["--steps", "+3"], INT_FLAG + "'+3'"),
    ("calibrate-repeats-leading-zero", ["calibrate", "--out", "{d}/cal", "--model", "gpt2-tiny", "--repeats", "007"],
     INT_FLAG + "'007'"),
    ("validate-run-steps-minus-zero", ["validate-run", "--out", "{d}/val", "--steps", "-0"], INT_FLAG + "'-0'"),
    ("profile-layers-fullwidth", PROFILE + ["--seqs", "64", "--layers", "\uff12"], INT_FLAG + "'\uff12'"),
    ("synth-max-len-underscores", ["synth-profile", "--out", "{d}/s.csv", "--max-len", "1_048_576"],
     INT_FLAG + "'1_048_576'"),
    ("lengths-pack-tokens-arabic-indic", ["lengths", "{d}/texts", "--out", "{d}/x.txt", "--pack-tokens", "\u0665"],
     INT_FLAG + "'\u0665'"),
    ("cost-gpus-plus-sign", ["cost", "--model", "gpt", "--seq", "4096", "--gpus", "+8"], INT_FLAG + "'+8'"),
    ("experiment-global-batch-underscore", ["experiment", "fig2", "--global-batch", "3_2", "--out", "{d}/exp"],
     INT_FLAG + "'3_2'"),
    ("ablate-holdout-every-arabic-indic", ["ablate-costmodel", "--holdout-every", "\u0664", "--no-regret"],
     INT_FLAG + "'\u0664'"),
    ("train-lr-arabic-indic", TRAIN + ["--lr", "\u0661"], NUMBER_FLAG + "'\u0661'"),
    ("simulate-gamma-underscore", SIM_METP + ["--gamma", "0.0_5"], NUMBER_FLAG + "'0.0_5'"),
    ("plan-reserve-gib-hex", ["plan", "--model", "gpt", "--seq", "4096", "--reserve-gib", "0x1p3"],
     NUMBER_FLAG + "'0x1p3'"),
    ("calibrate-budget-fullwidth", ["calibrate", "--out", "{d}/cal", "--model", "gpt2-tiny", "--budget-s", "\uff15"],
     NUMBER_FLAG + "'\uff15'"),
    ("workload-uniform-underscore", ["workload", "uniform:1_000:2000"], "parameters must be numbers in ASCII digits"),
    ("workload-lognormal-arabic-indic", ["workload", "lognormal:\u0665\u0661\u0662:0.5"],
     "parameters must be numbers in ASCII digits"),
    # JSON that Python cannot read: RecursionError / ValueError tracebacks before
    ("tokens-nested-too-deep", ["workload", "file:{d}/tok_deep.jsonl"], "tok_deep.jsonl line 1: not JSON Python"),
    ("tokens-integer-beyond-4300-digits", ["workload", "file:{d}/tok_digits.jsonl"], "more than 4,300 digits"),
    ("train-tokens-nested-too-deep", ["train", "--model", "gpt2-tiny", "--dataset", "file:{d}/tok_deep.jsonl",
                                      "--steps", "1", "--no-progress"], "nested too deep"),
    ("train-text-dataset-nested-too-deep", TEXT_TRAIN + ["--dataset", "{d}/text_deep.jsonl"],
     "text_deep.jsonl line 1: not JSON Python can read (arrays or objects nested too deep)"),
    ("cfg-integer-beyond-4300-digits", COST_M + ["{d}/cfg_digits.json"], "more than 4,300 digits"),
    ("cfg-nested-too-deep", COST_M + ["{d}/cfg_deep.json"], "nested too deep"),
    ("train-init-from-config-nested-too-deep", ["train", "--init-from", "{d}/initdeep", "--dataset", "uniform:8:16",
                                                "--steps", "1"], "config.json is not valid JSON"),
    ("train-init-from-config-beyond-4300-digits", ["train", "--init-from", "{d}/initdigits", "--dataset",
                                                   "uniform:8:16", "--steps", "1"], "config.json is not valid JSON"),
    ("solve-integer-beyond-4300-digits", SOLVE + ["{d}/p_digits.json"], "more than 4,300 digits"),
    ("bench-seed-beyond-4300-digits", ["bench-solvers", "--seed", "1" * 5001],
     "--seed must be an integer from 0 to 2**63 - 1"),
    ("bench-seed-2^63", ["bench-solvers", "--seed", "9223372036854775808"],
     "--seed must be an integer from 0 to 2**63 - 1, got '9223372036854775808'"),
    # cluster TOML values that become 0 once scaled, named as written (was cluster.memory_bytes ... got 0)
    ("toml-memory-minus-zero", COST + ["{d}/mem_neg_zero.toml"], "memory_gib must be a finite number > 0, got -0.0"),
    ("toml-memory-underflows-to-0-bytes", COST + ["{d}/mem_tiny.toml"],
     "memory_gib must be a finite number > 0 (at least one byte), got 1e-300"),
    ("toml-hbm-zero", COST + ["{d}/hbm_zero.toml"], "hbm_zero.toml: hbm_gbps must be a finite number > 0, got 0"),
    ("toml-memory-date", COST + ["{d}/mem_date.toml"], "memory_gib must be a finite number, got 1979-05-27"),
]
"""Flag syntax, unreadable JSON and scaled TOML cases (part of SWEEP_CASES)."""


SWEEP_CASES: list[tuple[str, list[str], str]] = [
    # (id, argv, text the one line must show: the value as the user wrote it)
    ("cfg-n-embd-float", COST_M + ["{d}/cfg_embd_float.json"], "64.9"),
    ("cfg-n-layer-1e400", COST_M + ["{d}/cfg_layer_1e400.json"], "1e400"),
    ("cfg-n-layer-above-2^53", COST_M + ["{d}/cfg_layer_2^53.json"], BIG),
    ("cfg-tie-string", ["plan", "--seq", "64", "--model", "{d}/cfg_tie_string.json"], '"false"'),
    ("cfg-kv-heads-0", COST_M + ["{d}/cfg_kv_0.json"], "num_key_value_heads"),
    ("cfg-kv-heads-3", COST_M + ["{d}/cfg_kv_3.json"], "num_key_value_heads"),
    ("cfg-dtype-float64", COST_M + ["{d}/cfg_dtype_f64.json"], '"float64"'),
    ("cfg-eps-negative-train", ["train", "--model", "{d}/cfg_eps_neg.json", "--dataset", "uniform:8:16", "--steps",
                                "1", "--no-progress"], "-1e-05"),
    ("cfg-rms-eps-nan", COST_M + ["{d}/cfg_rms_nan.json"], "NaN"),
    ("cfg-rope-theta-string", COST_M + ["{d}/cfg_theta_str.json"], '"1e4"'),
    ("cfg-head-dim-float", COST_M + ["{d}/cfg_head_dim_float.json"], "12.0"),
    ("cfg-model-type-number", COST_M + ["{d}/cfg_type_number.json"], "model_type"),
    ("cfg-json-array", COST_M + ["{d}/cfg_array.json"], "JSON object"),
    ("cfg-bias-int-calibrate", ["calibrate", "--out", "{d}/cal", "--model", "{d}/cfg_bias_int.json"], "attention_bias"),
    ("cfg-vocab-string-validate-run", ["validate-run", "--out", "{d}/val", "--model", "{d}/cfg_vocab_str.json"],
     '"100"'),
    ("cfg-n-head-bool-profile", ["profile", "--model", "{d}/cfg_head_bool.json", "--seqs", "64", "--strategies",
                                 "metp", "--p", "2", "--out", "{d}/p.csv"], "true"),
    ("toml-gpus-above-2^53", COST + ["{d}/gpus_2^53.toml"], "gpus"),
    ("toml-gpus-bool", COST + ["{d}/gpus_bool.toml"], "gpus"),
    ("toml-gpus-zero", COST + ["{d}/gpus_zero.toml"], "gpus"),
    ("toml-mem-1e400", COST + ["{d}/mem_1e400.toml"], "1e400"),
    ("toml-mem-1e300-overflows-bytes", COST + ["{d}/mem_1e300.toml"], "1e300"),
    ("toml-tflops-1e308-overflows-flops", COST + ["{d}/tflops_1e308.toml"], "1e308"),
    ("toml-mem-string", COST + ["{d}/mem_string.toml"], "memory_gib"),
    ("toml-mem-bool", COST + ["{d}/mem_bool.toml"], "memory_gib"),
    ("toml-bw-1e400", COST + ["{d}/bw_1e400.toml"], "1e400"),
    ("toml-alpha-bool", COST + ["{d}/alpha_bool.toml"], "p2p"),
    ("toml-base-int", COST + ["{d}/base_int.toml"], "base"),
    ("lengths-1e400", ["workload", "file:{d}/lens_1e400.txt"], "1e400"),
    ("lengths-above-2^53-simulate", ["simulate", "--model", "gpt", "--dataset", "file:{d}/lens_2^53.txt", "--policy",
                                     "static:metp"], BIG),
    ("lengths-negative", ["workload", "file:{d}/lens_neg.txt"], "-5"),
    ("lengths-zero", ["workload", "file:{d}/lens_zero.txt"], "0"),
    ("lengths-fraction", ["workload", "file:{d}/lens_frac.txt"], "12.5"),
    ("lengths-empty", ["workload", "file:{d}/lens_empty.txt"], "no lengths"),
    ("lengths-word-train", ["train", "--model", "gpt2-tiny", "--dataset", "file:{d}/lens_word.txt", "--steps", "1",
                            "--no-progress"], "many"),
    ("tokens-float", ["workload", "file:{d}/tok_float.jsonl"], "1.5"),
    ("tokens-negative", ["workload", "file:{d}/tok_neg.jsonl"], "-1"),
    ("tokens-string", ["workload", "file:{d}/tok_str.jsonl"], '"a"'),
    ("tokens-bool", ["workload", "file:{d}/tok_bool.jsonl"], "true"),
    ("tokens-1e400", ["workload", "file:{d}/tok_1e400.jsonl"], "1e400"),
    ("tokens-object", ["workload", "file:{d}/tok_obj.jsonl"], "input_ids"),
    ("tokens-empty-list", ["workload", "file:{d}/tok_empty.jsonl"], "0"),
    ("tokens-negative-train", ["train", "--model", "gpt2-tiny", "--dataset", "file:{d}/tok_neg.jsonl", "--steps", "1",
                               "--no-progress"], "token ids"),
    ("cost-seq-above-2^53", ["cost", "--model", "gpt", "--seq", BIG], BIG),
    ("cost-seq-1e400", ["cost", "--model", "gpt", "--seq", "1e400"], "1e400"),
    ("cost-seq-negative", ["cost", "--model", "gpt", "--seq", "-4096"], "-4096"),
    ("cost-seq-0", ["cost", "--model", "gpt", "--seq", "0"], "0"),
    ("cost-batch-above-2^53", ["cost", "--model", "gpt", "--seq", "4096", "--batch", BIG], "batch"),
    ("plan-budget-1e400", ["plan", "--model", "gpt", "--seq", "4096", "--budget-gb", "1e400"], "budget"),
    ("plan-budget-negative", ["plan", "--model", "gpt", "--seq", "4096", "--budget-gb", "-1"], "budget"),
    ("workload-uniform-1e400", ["workload", "uniform:1e400:2"], "1e400"),
    ("workload-lognormal-1e400", ["workload", "lognormal:1e400:1"], "1e400"),
    ("workload-uniform-negative", ["workload", "uniform:-5:10"], "-5"),
    ("workload-size-above-2^53", ["workload", "grch38", "--size", BIG], "size"),
    ("workload-seed-2^64", ["workload", "grch38", "--seed", "18446744073709551616"], "18446744073709551616"),
    ("simulate-seed-2^64", ["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "static:metp", "--seed",
                            "18446744073709551616"], "18446744073709551616"),
    ("simulate-gamma-1e400", ["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "static:metp",
                              "--gamma", "1e400"], "gamma"),
    ("simulate-gamma-negative", ["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "static:metp",
                                 "--gamma", "-0.5"], "gamma"),
    ("train-lr-1e400", TRAIN + ["--lr", "1e400"], "lr"),
    ("train-seed-2^64", TRAIN + ["--seed", "18446744073709551616"], "18446744073709551616"),
    ("train-budget-1e400", TRAIN + ["--budget-gb", "1e400"], "budget"),
    ("train-batch-0", TRAIN + ["--batch", "0"], "batch"),
    ("train-weight-decay-nan", TRAIN + ["--weight-decay", "nan"], "weight"),
    ("train-weight-decay-negative", TRAIN + ["--weight-decay", "-1"], "weight"),
    ("synth-ratio-1e400", ["synth-profile", "--out", "{d}/s.csv", "--ratio", "1e400"], "ratio"),
    ("synth-noise-negative", ["synth-profile", "--out", "{d}/s.csv", "--time-noise", "-1"], "noise"),
    ("bench-sizes-above-2^53", ["bench-solvers", "--sizes", BIG], "sizes"),
    ("bench-sizes-1e400", ["bench-solvers", "--sizes", "1e400"], "1e400"),
    ("compare-seqs-above-2^53", ["compare-solvers", "--model", "gpt", "--seqs", "4096," + BIG], BIG),
    ("calibrate-budget-1e400", ["calibrate", "--out", "{d}/cal", "--model", "gpt2-tiny", "--budget-s", "1e400"],
     "budget"),
    ("validate-run-max-len-1e400", ["validate-run", "--out", "{d}/val", "--max-len", "1e400"], "max-len"),
    ("profile-seqs-1e400", ["profile", "--model", "gpt2-tiny", "--seqs", "1e400", "--strategies", "metp", "--out",
                            "{d}/p.csv"], "1e400"),
    ("experiment-size-above-2^53", ["experiment", "fig2", "--size", BIG, "--out", "{d}/exp"], "size"),
    ("paper-profile-ratio-1e400", ["paper-profile", "--out", "{d}/pp.csv", "--ratio", "1e400"], "ratio"),
    # float flags: refused naming the flag and echoing the text typed, never the float it became (inf, nan, 2000.0)
    ("train-lr-1e400-as-typed", TRAIN + ["--lr", "1e400"], "--lr must be a finite number > 0 and <= 1000, got 1e400"),
    ("train-lr-2e3-as-typed", TRAIN + ["--lr", "2e3"], "--lr must be a finite number > 0 and <= 1000, got 2e3"),
    ("train-weight-decay-NaN-as-typed", TRAIN + ["--weight-decay", "NaN"],
     "--weight-decay must be a finite number >= 0 and <= 1000, got NaN"),
    ("train-clip-grad-Infinity-as-typed", TRAIN + ["--clip-grad", "Infinity"],
     "--clip-grad must be a finite number >= 0 and <= 1e+09, got Infinity"),
    ("train-budget-gib-1E999-as-typed", TRAIN + ["--budget-gib", "1E999"],
     "--budget-gib must be a finite number >= 0 and <= 1e+09, got 1E999"),
    ("train-lr-word", TRAIN + ["--lr", "fast"], "argument --lr: invalid number value: 'fast'"),
    ("plan-reserve-gib-1e400", ["plan", "--model", "gpt", "--seq", "4096", "--reserve-gib", "1e400"],
     "--reserve-gib must be a finite number >= 0 and <= 1e+09, got 1e400"),
    ("simulate-reserve-gb-1e400", ["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "static:metp",
                                   "--reserve-gb", "1e400"], "--reserve-gb must be a finite number >= 0"),
    ("synth-ratio-1e400-as-typed", ["synth-profile", "--out", "{d}/s.csv", "--ratio", "1e400"],
     "--ratio must be a finite number > 1, got 1e400"),
    ("calibrate-budget-Inf-as-typed", ["calibrate", "--out", "{d}/cal", "--model", "gpt2-tiny", "--budget-s", "Inf"],
     "--budget-s must be a positive number of seconds, got Inf"),
    # encodings: files that are not UTF-8 or not JSON, digits of other scripts
    ("train-text-dataset-not-utf8", TEXT_TRAIN + ["--dataset", "{d}/text_latin1.jsonl"],
     "--dataset '{d}/text_latin1.jsonl' line 1 is not UTF-8 text"),
    ("train-text-eval-dataset-not-utf8", TEXT_TRAIN + ["--dataset", "{d}/text_ok.jsonl", "--eval-dataset",
                                                      "{d}/text_latin1.jsonl", "--eval-every", "1"],
     "--eval-dataset '{d}/text_latin1.jsonl' line 1 is not UTF-8 text"),
    ("train-token-file-not-utf8", ["train", "--model", "gpt2-tiny", "--dataset", "file:{d}/tok_latin1.jsonl",
                                   "--steps", "1", "--no-progress"],
     "--dataset '{d}/tok_latin1.jsonl' line 2 is not UTF-8 text"),
    ("train-tokenizer-not-json", ["train", "--model", "gpt2-tiny", "--dataset", "{d}/text_ok.jsonl", "--tokenizer",
                                  "{d}/tokenizer_garbage.json", "--steps", "1", "--no-progress"],
     "--tokenizer '{d}/tokenizer_garbage.json' is not a tokenizers file"),
    ("lengths-tokenizer-not-json", ["lengths", "{d}/texts", "--out", "{d}/x.txt", "--tokenizer",
                                    "{d}/tokenizer_garbage.json"],
     "--tokenizer '{d}/tokenizer_garbage.json' is not a tokenizers file"),
    ("lengths-tokenizer-not-utf8", ["lengths", "{d}/texts", "--out", "{d}/x.txt", "--tokenizer",
                                    "{d}/tokenizer_latin1.json"],
     "--tokenizer '{d}/tokenizer_latin1.json' is not a tokenizers file"),
    ("cost-documents-arabic-indic-digits", ["cost", "--model", "gpt", "--documents", "\u0664\u0660\u0669\u0666,2048"],
     "--documents must be a positive integer in ASCII digits (e.g. 4096 or 4K), got '\u0664\u0660\u0669\u0666'"),
    ("plan-seq-fullwidth-digits", ["plan", "--model", "gpt", "--seq", "\uff14\uff10\uff19\uff16"],
     "--seq must be a positive integer in ASCII digits"),
    ("bench-seed-superscript", ["bench-solvers", "--seed", "\u00b2"],
     "--seed must be an integer from 0 to 2**63 - 1, got '\u00b2'"),
    ("export-hf-shard-size-arabic-indic", ["export-hf", "--checkpoint", "{d}/ckpt_bad", "--out", "{d}/hf-new",
                                           "--max-shard-size", "\u0665GB"], "--max-shard-size must be a positive size"),
    *NUMBER_CASES,
    *SYNTAX_CASES,
]
