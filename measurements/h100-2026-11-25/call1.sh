#!/bin/bash
# One device call: the GPU session, then the train command on one GPU (CLI end to end, packed, long).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
R=/tmp/r; mkdir -p $R
save() { tar czf $OUT/all.tgz -C $R . 2>/dev/null; }
{ nvidia-smi; python3 -c "import torch,sys;print(sys.version, torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"; python3 -m pip list 2>/dev/null | grep -i -E "^(torch|flash|pandas|networkx|tqdm|pytest|hypothesis|safetensors|transformers|tokenizers|numpy) "; } > $R/env.txt 2>&1
cat $R/env.txt
timeout 350 python3 -m runtime.measure.gpu_session --out $R/session --budget-s 320 > $R/session.log 2>&1; echo "session rc=$?" >> $R/session.log; tail -25 $R/session.log; save
M=measurements/h100-2026-11-25/llama1b; C="--cluster h100-80gb-x8 --no-progress --nproc 1"
timeout 70 python3 -m paradyse_lab train --model $M --dataset uniform:4096:32768 --steps 6 $C --log-file $R/train_var.csv > $R/train_var.log 2>&1; echo "rc=$?" >> $R/train_var.log; tail -8 $R/train_var.log; save
timeout 60 python3 -m paradyse_lab train --model $M --dataset uniform:1024:16384 --pack-tokens 65536 --steps 4 $C --log-file $R/train_pack.csv > $R/train_pack.log 2>&1; echo "rc=$?" >> $R/train_pack.log; tail -8 $R/train_pack.log; save
timeout 75 python3 -m paradyse_lab train --model $M --dataset uniform:125688:125688 --steps 2 $C --log-file $R/train_max.csv > $R/train_max.log 2>&1; echo "rc=$?" >> $R/train_max.log; tail -8 $R/train_max.log; save
ls -la $R $R/session
