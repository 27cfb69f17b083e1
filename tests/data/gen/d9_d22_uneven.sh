#!/usr/bin/env bash
# D9 / D22: ranks run different numbers of batches; the long rank times out in DDP's allreduce.
source "$(dirname "$0")/_common.sh"
W=$GEN/d9_uneven_batches.py

# D22: data[rank::world] manual sharding, 1001 samples / 2 ranks / bs 100 -> 6 vs 5 batches
capture $LOGS/D22/manual-shard-uneven-len-torchrun.log \
  "torchrun --nproc-per-node=2 --master-port=29771 $W --data manual-shard --timeout 4"
# D22: same data, but the epoch-end loss all_reduce meets the long rank's gradient allreduce
capture $LOGS/D22/manual-shard-epoch-loss-allreduce-sigabrt.log \
  "torchrun --nproc-per-node=2 --master-port=29772 $W --data manual-shard --sync-loss"
# D22: DistributedSampler everywhere, but rank 0's loader batch size differs (4 vs 5 batches)
capture $LOGS/D22/sampler-per-rank-batch-size-3-procs.log \
  "export MASTER_ADDR=127.0.0.1 MASTER_PORT=29773 WORLD_SIZE=3; RANK=1 python $W --data sampler --timeout 6 & RANK=2 python $W --data sampler --timeout 6 & RANK=0 python $W --data sampler --timeout 6; wait"

# D9: per-rank IterableDataset shards of different sizes, per-rank log files
rm -rf /tmp/gen_d9_logdir
capture $LOGS/D9/iterable-shards-uneven-3-ranks/launcher.log \
  "torchrun --nproc-per-node=3 --master-port=29774 --log-dir /tmp/gen_d9_logdir -r 3 $W --data iterable --bs 32 --timeout 5"
collect_logdir /tmp/gen_d9_logdir $LOGS/D9/iterable-shards-uneven-3-ranks
# D9: per-rank filtering of outlier samples after sharding, 4 ranks
capture $LOGS/D9/per-rank-filter-4-ranks-torchrun.log \
  "torchrun --nproc-per-node=4 --master-port=29775 $W --data filter --bs 20 --timeout 3 --eval-seconds 5"
# D9: two processes started by hand, iterable shards, longer timeout
capture $LOGS/D9/iterable-shards-two-processes.log \
  "export MASTER_ADDR=127.0.0.1 MASTER_PORT=29776 WORLD_SIZE=2; RANK=1 python $W --data iterable --bs 50 --timeout 8 --eval-seconds 12 & RANK=0 python $W --data iterable --bs 50 --timeout 8 --eval-seconds 12; wait"
