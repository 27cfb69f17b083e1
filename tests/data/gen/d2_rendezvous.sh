#!/usr/bin/env bash
# D2: multi-node launches with a single-node rendezvous, or with rendezvous settings that differ per node.
# Two "nodes" are network namespaces (see _netns.sh); needs root for `ip netns`.
source "$(dirname "$0")/_common.sh"
source "$ROOT/$GEN/_netns.sh"
trap netns_down EXIT
netns_up 1500 1500
W=$GEN/d2_train.py

# 1. the single-node command copied to both nodes: two independent 1-node jobs, each with WORLD_SIZE=2
D=$LOGS/D2/standalone-copied-to-two-nodes
mkdir -p $D
run_on B torchrun --standalone --nproc-per-node=2 $W > $D/node1.log 2>&1 &
run_on A torchrun --standalone --nproc-per-node=2 $W > $D/node0.log 2>&1
wait

# 2. both nodes ask for --nnodes=2 but each generated its own --rdzv-id: nobody ever completes the rendezvous
D=$LOGS/D2/different-rdzv-id-per-node
mkdir -p $D
run_on B timeout 120 torchrun --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=10.77.0.1:29821 \
  --rdzv-id=job-\$RANDOM-b --rdzv-conf=is_host=false,join_timeout=20 --local-addr=10.77.0.2 $W > $D/node1.log 2>&1 &
run_on A timeout 120 torchrun --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=10.77.0.1:29821 \
  --rdzv-id=job-\$RANDOM-a --rdzv-conf=is_host=true,join_timeout=20 --local-addr=10.77.0.1 $W > $D/node0.log 2>&1
wait
# the ids above were literally job-$RANDOM-a / job-$RANDOM-b (different on each node), as with an unset $JOB_ID

# 3. node 0 launched with --nnodes=2, node 1 with the old single-node line (--standalone): node 0 waits alone
capture $LOGS/D2/node0-nnodes2-waits-node1-standalone.log \
  "ip netns exec gdnsB env GLOO_SOCKET_IFNAME=gdvb torchrun --standalone --nproc-per-node=1 $W > /dev/null 2>&1 & ip netns exec gdnsA env GLOO_SOCKET_IFNAME=gdva timeout 120 torchrun --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=10.77.0.1:29822 --rdzv-id=exp7 --rdzv-conf=is_host=true,join_timeout=20 --local-addr=10.77.0.1 $W; wait"
