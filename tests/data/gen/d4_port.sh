#!/usr/bin/env bash
# D4: two jobs on one box fighting over the same master/rendezvous port.
source "$(dirname "$0")/_common.sh"

# 1. second torchrun with the same --master-port while the first is still training (separate terminals)
STEPS=30 torchrun --nnodes=1 --nproc-per-node=2 --master-port=29731 $GEN/d4_train.py > /tmp/gen_d4_first.log 2>&1 &
FIRST=$!
sleep 6
capture $LOGS/D4/two-torchrun-same-master-port.log \
  "torchrun --nnodes=1 --nproc-per-node=2 --master-port=29731 $GEN/d4_train.py"
wait $FIRST

# 2. both launched from one terminal (first one backgrounded with &): the outputs interleave
capture $LOGS/D4/two-torchrun-one-terminal-interleaved.log \
  "STEPS=20 torchrun --nnodes=1 --nproc-per-node=2 --master-port=29735 --tee 3 $GEN/d4_train.py & sleep 5; torchrun --nnodes=1 --nproc-per-node=2 --master-port=29735 --tee 3 $GEN/d4_train.py; wait"

# 3. two mp.spawn scripts with the same hard-coded MASTER_PORT
PORT=29733 python $GEN/d4_spawn_train.py 2 10 > /tmp/gen_d4_spawn_first.log 2>&1 &
FIRST=$!
sleep 7
capture $LOGS/D4/mp-spawn-hardcoded-master-port.log "PORT=29733 python $GEN/d4_spawn_train.py 3 2"
wait $FIRST

# 4. the port is held by something else entirely (a leftover http server / notebook)
python -m http.server 29736 --bind 0.0.0.0 > /dev/null 2>&1 &
SRV=$!
sleep 1
capture $LOGS/D4/port-held-by-other-process.log \
  "torchrun --nproc-per-node=3 --master-addr=127.0.0.1 --master-port=29736 $GEN/d4_train.py"
kill $SRV

# 5. two c10d-rendezvous jobs pointed at the same --rdzv-endpoint with different ids
STEPS=12 torchrun --nnodes=1 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=localhost:29734 --rdzv-id=jobA $GEN/d4_train.py > /tmp/gen_d4_c10d_first.log 2>&1 &
FIRST=$!
sleep 6
capture $LOGS/D4/two-jobs-same-rdzv-endpoint.log \
  "timeout 90 torchrun --nnodes=1 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=localhost:29734 --rdzv-id=jobB $GEN/d4_train.py"
wait $FIRST
