#!/bin/bash
# Third device call: GPU tests after the chunked cross-entropy, the variable-length run, llama3-8b whole-model
# rank-local profile rows (embedding, head and loss included) to compare with the cost model.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
R=/tmp/r; mkdir -p $R
save() { tar czf $OUT/all.tgz -C $R . 2>/dev/null; }
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu -rA > $R/pytest_gpu.txt 2>&1; echo "rc=$?" >> $R/pytest_gpu.txt; tail -22 $R/pytest_gpu.txt; save
M=measurements/h100-2026-11-25/llama1b; C="--cluster h100-80gb-x8 --no-progress --nproc 1"
timeout 100 python3 -m paradyse_lab train --model $M --dataset uniform:4096:32768 --steps 6 $C --log-file $R/train_var.csv > $R/train_var.log 2>&1; echo "rc=$?" >> $R/train_var.log; tail -6 $R/train_var.log; save
timeout 200 python3 -m paradyse_lab profile --model llama3-8b --seqs 16384,65536,131072 --strategies megatron_ts,ulysses_z,metp --mode rank-local --p 8 --layers 2 --device cuda --dtype bf16 --cluster h100-80gb-x8 --warmup 1 --repeats 2 --out $R/llama3-8b_rank-local_p8.csv > $R/profile.log 2>&1; echo "rc=$?" >> $R/profile.log; tail -3 $R/profile.log; save
cat $R/*.csv | cut -c1-220
