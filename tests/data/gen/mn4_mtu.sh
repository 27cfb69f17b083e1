#!/usr/bin/env bash
# MN4: jumbo-frame MTU mismatch. Two "nodes" (network namespaces) configured with MTU 9000, joined by a
# bridge at MTU 1500: rendezvous and small all_reduces pass, large payloads are silently dropped and the
# collective times out. Needs root for `ip netns`.
source "$(dirname "$0")/_common.sh"
source "$ROOT/$GEN/_netns.sh"
trap netns_down EXIT
netns_up 9000 1500

# 1. two plain python processes, growing all_reduce sizes
LOG=$LOGS/MN4/jumbo-9000-bridge-1500-allreduce-sizes.log
mkdir -p $LOGS/MN4
{
  echo "\$ ip -n gdnsA link show gdva; ip -n gdnsM link show gdbr0"
  ip -n gdnsA link show gdva; ip -n gdnsM link show gdbr0
} > $LOG 2>&1
capture_append $LOG "ip netns exec gdnsB env MASTER_ADDR=10.77.0.1 MASTER_PORT=29811 WORLD_SIZE=2 RANK=1 GLOO_SOCKET_IFNAME=gdvb PG_TIMEOUT=10 python $GEN/mn4_mtu_allreduce.py & ip netns exec gdnsA env MASTER_ADDR=10.77.0.1 MASTER_PORT=29811 WORLD_SIZE=2 RANK=0 GLOO_SOCKET_IFNAME=gdva PG_TIMEOUT=10 python $GEN/mn4_mtu_allreduce.py; wait"
echo "wrote $LOG"

# 2. two-node torchrun (c10d rendezvous on node A), DDP training: one console log per node
D=$LOGS/MN4/two-node-torchrun-ddp-jumbo-frames
mkdir -p $D
run_on B PG_TIMEOUT=10 torchrun --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d \
  --rdzv-endpoint=10.77.0.1:29812 --rdzv-id=mtu-test --rdzv-conf=is_host=false --local-addr=10.77.0.2 \
  $GEN/mn4_ddp_train.py > $D/node1.log 2>&1 &
run_on A PG_TIMEOUT=10 torchrun --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d \
  --rdzv-endpoint=10.77.0.1:29812 --rdzv-id=mtu-test --rdzv-conf=is_host=true --local-addr=10.77.0.1 \
  $GEN/mn4_ddp_train.py > $D/node0.log 2>&1
wait
echo "wrote $D/node0.log $D/node1.log"

# 3. two nodes x 2 processes, static rendezvous (--master-addr), per-rank files via --log-dir, longer timeout
rm -rf /tmp/gen_mn4_logdir_a /tmp/gen_mn4_logdir_b
D=$LOGS/MN4/static-rdzv-2x2-per-rank
mkdir -p $D
run_on B PG_TIMEOUT=20 torchrun --nnodes=2 --node-rank=1 --nproc-per-node=2 --master-addr=10.77.0.1 \
  --master-port=29813 --local-addr=10.77.0.2 --log-dir /tmp/gen_mn4_logdir_b -r 3 $GEN/mn4_ddp_train.py > /dev/null 2>&1 &
run_on A PG_TIMEOUT=20 torchrun --nnodes=2 --node-rank=0 --nproc-per-node=2 --master-addr=10.77.0.1 \
  --master-port=29813 --local-addr=10.77.0.1 --log-dir /tmp/gen_mn4_logdir_a -r 3 $GEN/mn4_ddp_train.py > $D/node0-launcher.log 2>&1
wait
collect_logdir /tmp/gen_mn4_logdir_a $D/node0-tmp
collect_logdir /tmp/gen_mn4_logdir_b $D/node1-tmp
for f in $D/node0-tmp/*.log; do mv "$f" "$D/node0-$(basename "$f")"; done
for f in $D/node1-tmp/*.log; do mv "$f" "$D/node1-$(basename "$f")"; done
rmdir $D/node0-tmp $D/node1-tmp
ls $D
