#!/usr/bin/env bash
# MN5: torchrun --max-restarts relaunches the worker group, but the script does not resume,
# so training starts again at epoch 0.
source "$(dirname "$0")/_common.sh"
W=$GEN/mn5_restart_train.py

capture $LOGS/MN5/standalone-restart-epoch0-again-loglevel-info.log \
  "LOGLEVEL=INFO torchrun --standalone --nproc-per-node=2 --max-restarts=2 $W"

rm -f /tmp/gen_mn5_ckpt.pt
capture $LOGS/MN5/preemption-exit-checkpoint-saved-not-loaded.log \
  "torchrun --standalone --nproc-per-node=2 --max-restarts=3 $W --crash-rank 1 --crash-epoch 3 --how exit --epochs 5 --ckpt /tmp/gen_mn5_ckpt.pt"

# same with 3 ranks: on this box the restarted gloo group sometimes cannot reconnect (stale peer addresses)
rm -f /tmp/gen_mn5_ckpt.pt
capture $LOGS/MN5/restart-3-ranks-gloo-reconnect-refused.log \
  "torchrun --standalone --nproc-per-node=3 --max-restarts=3 $W --crash-rank 2 --crash-epoch 3 --how exit --epochs 5 --ckpt /tmp/gen_mn5_ckpt.pt"

rm -rf /tmp/gen_mn5_logdir
capture $LOGS/MN5/c10d-sigkill-restart/launcher.log \
  "LOGLEVEL=INFO torchrun --nnodes=1 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=localhost:29792 --rdzv-id=exp42 --max-restarts=2 --log-dir /tmp/gen_mn5_logdir -r 3 $W --crash-rank 0 --crash-epoch 1 --how kill"
collect_logdir /tmp/gen_mn5_logdir $LOGS/MN5/c10d-sigkill-restart

capture $LOGS/MN5/crash-every-attempt-restarts-exhausted.log \
  "LOGLEVEL=INFO torchrun --standalone --nproc-per-node=2 --max-restarts=2 $W --crash-always --crash-epoch 1 --epochs 3"

capture $LOGS/MN5/static-master-port-restart-fails-to-reconnect.log \
  "torchrun --nproc-per-node=2 --max-restarts=2 --master-port=29791 $W"
