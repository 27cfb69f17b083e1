#!/usr/bin/env bash
# D8: DDP parameters that get no gradient -> "Expected to have finished reduction in the prior iteration".
source "$(dirname "$0")/_common.sh"

capture $LOGS/D8/aux-head-unused-torchrun.log \
  "torchrun --nproc-per-node=2 --master-port=29741 $GEN/d8_unused_head.py --epochs 2"

capture $LOGS/D8/multimodal-branch-mp-spawn.log "python $GEN/d8_frozen_branch_spawn.py 3 29743"

# per-rank files via --log-dir, with TORCH_DISTRIBUTED_DEBUG=INFO naming the parameters
rm -rf /tmp/gen_d8_logdir
capture $LOGS/D8/layerdrop-debug-info/launcher.log \
  "TORCH_DISTRIBUTED_DEBUG=INFO torchrun --nproc-per-node=2 --master-port=29742 --log-dir /tmp/gen_d8_logdir -r 3 $GEN/d8_layerdrop.py"
collect_logdir /tmp/gen_d8_logdir $LOGS/D8/layerdrop-debug-info

# two plain python processes started by hand in one terminal
capture $LOGS/D8/manual-two-process-launch.log \
  "export MASTER_ADDR=127.0.0.1 MASTER_PORT=29744 WORLD_SIZE=2; RANK=1 LOCAL_RANK=1 python $GEN/d8_unused_head.py --epochs 1 --steps 4 & RANK=0 LOCAL_RANK=0 python $GEN/d8_unused_head.py --epochs 1 --steps 4; wait"
