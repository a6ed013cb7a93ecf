#!/usr/bin/env bash
# The closed-loop benchmark of docs/results.md, "Simulation against execution": measure this machine, then train every
# policy for real and compare with the analytic model (no fitting), the calibrated one and the replay model (the
# default on a measured folder: priced from the kernel tables calibrate measured in DIR/kernels/).
#
#   bash examples/closed_loop_benchmark.sh [DIR]        # default DIR: results/execute
#
# Prints the machine, its load before and after, the three validate-run tables and the three models' errors side
# by side (examples/replay_closed_loop.py); keeps the summaries (DIR/validate_run_summary_analytic.csv,
# DIR/validate_run_summary_calibrated.csv, DIR/validate_run_summary.csv: replay's run, and
# DIR/validate_run_summary_replay.csv: the replay model on that run's steps). Extra arguments after DIR go to
# every validate-run command (e.g. --repeats 5). Run it on a quiet machine: a loaded one measures its load.
set -euo pipefail
out="${1:-results/execute}"
shift || true
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname): $(nproc) CPUs, $(python -c 'import torch; print("torch", torch.__version__)')"
echo "# load before: $(uptime)"
python -m paradyse_lab calibrate --out "$out"
echo "# analytic model on the measured cluster (nothing fitted)"
python -m paradyse_lab validate-run --out "$out" --cost-model analytic "$@"
cp "$out/validate_run_summary.csv" "$out/validate_run_summary_analytic.csv"
echo "# calibrated model"
python -m paradyse_lab validate-run --out "$out" --cost-model calibrated "$@"
cp "$out/validate_run_summary.csv" "$out/validate_run_summary_calibrated.csv"
echo "# replay model (the default on a measured folder with kernel tables)"
python -m paradyse_lab validate-run --out "$out" "$@"
echo "# the three models side by side"
python examples/replay_closed_loop.py "$out"
echo "# load after: $(uptime)"
