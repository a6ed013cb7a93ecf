#!/bin/bash
# Second device call: the GPU tests after the head-memory fix, the variable-length run that ran out of memory,
# and the planned longest length with recompute on one GPU.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
R=/tmp/r; mkdir -p $R
save() { tar czf $OUT/all.tgz -C $R . 2>/dev/null; }
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu -rA > $R/pytest_gpu.txt 2>&1; echo "rc=$?" >> $R/pytest_gpu.txt; tail -25 $R/pytest_gpu.txt; save
M=measurements/h100-2026-11-25/llama1b; C="--cluster h100-80gb-x8 --no-progress --nproc 1"
timeout 100 python3 -m paradyse_lab train --model $M --dataset uniform:4096:32768 --steps 6 $C --log-file $R/train_var.csv > $R/train_var.log 2>&1; echo "rc=$?" >> $R/train_var.log; tail -8 $R/train_var.log; save
timeout 170 python3 -m paradyse_lab train --model $M --dataset uniform:237756:237756 --steps 1 --recompute --granularity sublayer $C --log-file $R/train_max_rc.csv > $R/train_max_rc.log 2>&1; echo "rc=$?" >> $R/train_max_rc.log; tail -8 $R/train_max_rc.log; save
cat $R/*.csv
