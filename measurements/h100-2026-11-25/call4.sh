#!/bin/bash
# Fourth device call, after merging: the GPU tests (tiled MLP and offload, vocab-parallel head), fused AdamW
# train run, a grouped-step train run on CUDA (world 1), and a vocab/tiled/offload plan executed on one GPU.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
R=/tmp/r; mkdir -p $R
save() { tar czf $OUT/all.tgz -C $R . 2>/dev/null; }
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu -rA > $R/pytest_gpu.txt 2>&1; echo "rc=$?" >> $R/pytest_gpu.txt; tail -28 $R/pytest_gpu.txt; save
M=measurements/h100-2026-11-25/llama1b; C="--cluster h100-80gb-x8 --no-progress --nproc 1"
timeout 80 python3 -m paradyse_lab train --model $M --dataset uniform:4096:32768 --steps 6 $C --log-file $R/train_var.csv > $R/train_var.log 2>&1; echo "rc=$?" >> $R/train_var.log; tail -5 $R/train_var.log; save
timeout 60 python3 -m paradyse_lab train --nproc 1 --model gpt2-tiny --dataset uniform:16:64 --steps 3 --global-batch 3 --no-progress --log-file $R/train_grouped.csv > $R/train_grouped.log 2>&1; echo "rc=$?" >> $R/train_grouped.log; tail -5 $R/train_grouped.log; save
timeout 120 python3 -m paradyse_lab train --model $M --dataset uniform:65536:65536 --steps 2 --policy dynamic:dp+recompute+tiled+offload --granularity sublayer --budget-gib 40 $C --log-file $R/train_offload.csv > $R/train_offload.log 2>&1; echo "rc=$?" >> $R/train_offload.log; tail -6 $R/train_offload.log; save
cat $R/*.csv | cut -c1-250
