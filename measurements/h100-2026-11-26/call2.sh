#!/bin/bash
# Second device call (2026-11-26): the 160 MiB of the longest planned length. One step of `paradyse-lab train`
# (llama1b, 125,688 tokens, metp on all 16 layers, tiled loss, one GPU) in one process under CUDA's memory history
# (peak_blocks.py): its peak_bytes against both sessions' call1 step 1, and the blocks live at its peak with their
# frames. After runtime/strategies/metp.py's plain MLP stopped summing its weight gradients in fp32, the peak is expected to be
# the 2026-11-25 one (67,092,243,456 bytes), with no fp32 weight-gradient sum live at it. About a minute on one H100.
# On CPU: M=llama-tiny MAXLEN=256 OUT=... bash call2.sh (a dry run: no memory history).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
M=${M:-measurements/h100-2026-11-25/llama1b}; MAXLEN=${MAXLEN:-125688}
timeout 85 python3 measurements/h100-2026-11-26/peak_blocks.py --model $M --length $MAXLEN --out $OUT > $OUT/call2.log 2>&1
echo "rc=$?" >> $OUT/call2.log
tail -60 $OUT/call2.log
