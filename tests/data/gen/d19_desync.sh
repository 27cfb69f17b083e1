#!/usr/bin/env bash
# D19: mismatched collectives surfaced by TORCH_DISTRIBUTED_DEBUG=DETAIL (no DDP involved).
source "$(dirname "$0")/_common.sh"

capture $LOGS/D19/detail-allreduce-shape-mismatch-torchrun.log \
  "TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --nproc-per-node=2 --master-port=29761 $GEN/d19_metric_mismatch.py --mode shape"

capture $LOGS/D19/detail-broadcast-vs-allreduce-3-procs.log \
  "export MASTER_ADDR=127.0.0.1 MASTER_PORT=29762 WORLD_SIZE=3 TORCH_DISTRIBUTED_DEBUG=DETAIL; for r in 1 2; do RANK=\$r python $GEN/d19_metric_mismatch.py --mode op --steps 3 & done; RANK=0 python $GEN/d19_metric_mismatch.py --mode op --steps 3; wait"

capture $LOGS/D19/detail-dtype-mismatch-cpp-log-info.log \
  "TORCH_DISTRIBUTED_DEBUG=DETAIL TORCH_CPP_LOG_LEVEL=INFO torchrun --nproc-per-node=2 --master-port=29763 $GEN/d19_metric_mismatch.py --mode dtype --steps 2"

rm -rf /tmp/gen_d19_logdir
capture $LOGS/D19/detail-collective-order-4-ranks/launcher.log \
  "TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --nproc-per-node=4 --master-port=29764 --log-dir /tmp/gen_d19_logdir -r 3 $GEN/d19_metric_mismatch.py --mode order --steps 3"
collect_logdir /tmp/gen_d19_logdir $LOGS/D19/detail-collective-order-4-ranks
