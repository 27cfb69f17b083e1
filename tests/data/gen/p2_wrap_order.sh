#!/usr/bin/env bash
# P2: DDP(model, device_ids=[local_rank]) called while the model is still on the CPU (.to(device) comes after).
# The check fires before any CUDA call, so the exact error appears on a CPU-only box too.
source "$(dirname "$0")/_common.sh"
W=$GEN/p2_wrap_before_to.py

capture $LOGS/P2/ddp-device-ids-before-to-torchrun.log \
  "torchrun --nproc-per-node=2 --master-port=29831 $W --variant device-ids"

rm -rf /tmp/gen_p2_logdir
capture $LOGS/P2/ddp-output-device-before-to-4-ranks/launcher.log \
  "torchrun --nproc-per-node=4 --master-port=29832 --log-dir /tmp/gen_p2_logdir -r 3 $W --variant output-device"
collect_logdir /tmp/gen_p2_logdir $LOGS/P2/ddp-output-device-before-to-4-ranks

capture $LOGS/P2/syncbn-model-wrapped-before-to-single-process.log \
  "MASTER_ADDR=127.0.0.1 MASTER_PORT=29833 RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 python $W --variant resnet-like"
