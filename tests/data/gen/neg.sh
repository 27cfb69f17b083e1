#!/usr/bin/env bash
# Negatives: failures (and successes) that are NOT distributed-training catalogue entries.
source "$(dirname "$0")/_common.sh"
W=$GEN/neg_train.py
N=$LOGS/negative
rm -rf /tmp/gen_neg_ckpt

capture $N/clean-torchrun-2-procs-success.log "torchrun --nproc-per-node=2 --master-port=29841 $W --fail none"
capture $N/clean-mp-spawn-success.log "PORT=29842 python $GEN/d4_spawn_train.py 2 2"
capture $N/clean-torchrun-debug-info-success.log \
  "TORCH_DISTRIBUTED_DEBUG=INFO TORCH_CPP_LOG_LEVEL=INFO torchrun --nproc-per-node=2 --master-port=29843 $W --fail none --epochs 1"
capture $N/modulenotfound-deepspeed-torchrun.log "torchrun --nproc-per-node=2 --master-port=29844 $W --fail import"
capture $N/modulenotfound-single-process.log "python $W --fail import --single"
capture $N/keyerror-config-torchrun.log "torchrun --nproc-per-node=2 --master-port=29845 $W --fail keyerror"
capture $N/shape-mismatch-single-process.log "python $W --fail shape --single"
capture $N/shape-mismatch-torchrun-3-procs.log "torchrun --nproc-per-node=3 --master-port=29846 $W --fail shape"
capture $N/dataset-path-missing-torchrun.log "torchrun --nproc-per-node=2 --master-port=29847 $W --fail datapath"
# a script with a syntax error (written to /tmp so the repository holds no unparsable Python file)
mkdir -p /tmp/gen_neg_syntax && printf 'import torch\n\ndef train(:\n    pass\n' > /tmp/gen_neg_syntax/train.py
capture $N/syntaxerror-torchrun.log "torchrun --nproc-per-node=2 --master-port=29848 /tmp/gen_neg_syntax/train.py"
# disk full: a 2 MiB tmpfs in a private mount namespace (nothing outside this command sees the mount)
capture $N/disk-full-checkpoint-save-single-process.log \
  "unshare -m sh -c 'mkdir -p /tmp/gen_neg_full && mount -t tmpfs -o size=2m tmpfs /tmp/gen_neg_full && python $W --fail disk --single --ckpt-dir /tmp/gen_neg_full/checkpoints'"
rm -rf /tmp/gen_neg_ckpt
