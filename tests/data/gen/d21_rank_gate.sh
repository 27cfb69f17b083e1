#!/usr/bin/env bash
# D21: a collective (barrier / all_reduce / all_gather_object) inside an `if rank == 0:` branch.
source "$(dirname "$0")/_common.sh"

capture $LOGS/D21/save-checkpoint-barrier-rank0-torchrun.log \
  "PG_TIMEOUT=3 torchrun --nproc-per-node=2 --master-port=29751 $GEN/d21_save_barrier.py"

capture $LOGS/D21/validation-allreduce-rank0-mp-spawn.log \
  "python $GEN/d21_validation_allreduce.py 3 29752 2"

rm -rf /tmp/gen_d21_logdir
capture $LOGS/D21/log-all-gather-object-rank0/launcher.log \
  "PG_TIMEOUT_S=2 torchrun --nproc-per-node=2 --master-port=29753 --log-dir /tmp/gen_d21_logdir -r 3 $GEN/d21_log_gather.py"
collect_logdir /tmp/gen_d21_logdir $LOGS/D21/log-all-gather-object-rank0

capture $LOGS/D21/log-gather-rank0-debug-detail-3-procs.log \
  "export MASTER_ADDR=127.0.0.1 MASTER_PORT=29754 WORLD_SIZE=3 TORCH_DISTRIBUTED_DEBUG=DETAIL PG_TIMEOUT_S=3; RANK=1 python $GEN/d21_log_gather.py & RANK=2 python $GEN/d21_log_gather.py & RANK=0 python $GEN/d21_log_gather.py; wait"

# 4 ranks, bigger timeout, checkpoint barrier reached only by rank 0 after the others left the loop
capture $LOGS/D21/save-checkpoint-barrier-4-ranks-timeout-10s.log \
  "PG_TIMEOUT=10 torchrun --nproc-per-node=4 --master-port=29755 $GEN/d21_save_barrier.py"
