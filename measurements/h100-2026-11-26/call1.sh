#!/bin/bash
# One device call (2026-11-26), a regression check of the current tree on one H100 after the last GPU session:
# the GPU session script (--quick: its pytest stage runs tests/gpu; tiny GEMM, attention and profile shapes),
# then `paradyse-lab train` on one GPU: the variable-length run, a packed run and the planned longest length,
# each compared with measurements/h100-2026-11-25. On CPU: M=llama-tiny LENS=... DEVICE=cpu (a dry run).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
R=${R:-/tmp/r}; OUT=${OUT:-/tmp/out}; mkdir -p $R $OUT
M=${M:-measurements/h100-2026-11-25/llama1b}; DEVICE=${DEVICE:-cuda}
VAR=${VAR:-uniform:4096:32768}; PACK=${PACK:-uniform:1024:16384}; PACK_TOKENS=${PACK_TOKENS:-65536}; MAXLEN=${MAXLEN:-125688}
save() { tar czf $OUT/all.tgz -C $R . 2>/dev/null; }
run() { local name=$1 t=$2; shift 2; timeout $t "$@" > $R/$name.log 2>&1; echo "rc=$?" >> $R/$name.log; tail -6 $R/$name.log; save; }
{ nvidia-smi; python3 -c "import torch,sys,numba,numpy;print(sys.version, torch.__version__, torch.version.cuda, numba.__version__, numpy.__version__, torch.cuda.is_available() and torch.cuda.get_device_name())"; } > $R/env.txt 2>&1; tail -3 $R/env.txt
run session 170 python3 -m paradyse_lab.app.measure.gpu_session --quick --device $DEVICE --out $R/session --budget-s 150
C="--cluster h100-80gb-x8 --no-progress --nproc 1"
run train_var 100 python3 -m paradyse_lab train --model $M --dataset $VAR --steps 6 $C --log-file $R/train_var.csv
run train_pack 60 python3 -m paradyse_lab train --model $M --dataset $PACK --pack-tokens $PACK_TOKENS --steps 4 $C --log-file $R/train_pack.csv
run train_max 80 python3 -m paradyse_lab train --model $M --dataset uniform:$MAXLEN:$MAXLEN --steps 2 $C --log-file $R/train_max.csv
cat $R/*.csv | cut -c1-250
