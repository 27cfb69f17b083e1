#!/usr/bin/env bash
# D20: one rank fails (NaN guard, CUDA-OOM-style exception, corrupt sample, skipped OOM step); the rest
# are left in allreduce.
source "$(dirname "$0")/_common.sh"
W=$GEN/d20_rank_diverges.py

capture $LOGS/D20/nan-guard-rank1-torchrun-record.log \
  "torchrun --nproc-per-node=2 --master-port=29781 $W --fail nan --bad-rank 1 --at-step 7"

rm -rf /tmp/gen_d20_logdir
capture $LOGS/D20/simulated-cuda-oom-rank2-of-4/launcher.log \
  "torchrun --nproc-per-node=4 --master-port=29782 --log-dir /tmp/gen_d20_logdir -r 3 $W --fail oom --bad-rank 2 --at-step 5 --timeout 4"
collect_logdir /tmp/gen_d20_logdir $LOGS/D20/simulated-cuda-oom-rank2-of-4

capture $LOGS/D20/corrupt-sample-rank0-two-processes.log \
  "export MASTER_ADDR=127.0.0.1 MASTER_PORT=29783 WORLD_SIZE=2; RANK=1 python $W --fail data --bad-rank 0 --at-step 4 --timeout 10 & RANK=0 python $W --fail data --bad-rank 0 --at-step 4 --timeout 10; wait"

capture $LOGS/D20/oom-skip-batch-rank1-3-ranks-torchrun.log \
  "torchrun --nproc-per-node=3 --master-port=29784 --tee 3 $W --fail oom-skip --bad-rank 1 --at-step 6 --timeout 4 --steps 10"

capture $LOGS/D20/prefetch-thread-died-rank2-others-timeout.log \
  "export MASTER_ADDR=127.0.0.1 MASTER_PORT=29785 WORLD_SIZE=3; for r in 1 2; do RANK=\$r python $W --fail prefetch --bad-rank 2 --at-step 5 --timeout 5 & done; RANK=0 python $W --fail prefetch --bad-rank 2 --at-step 5 --timeout 5; sleep 2; kill %1 %2 2>/dev/null; wait"
