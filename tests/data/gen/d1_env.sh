#!/usr/bin/env bash
# D1: launching a torch.distributed script with plain `python` (no torchrun env contract).
source "$(dirname "$0")/_common.sh"
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT
capture $LOGS/D1/python-no-rank-env.log "python $GEN/d1_train_env.py"
capture $LOGS/D1/rank-set-no-master-addr.log "RANK=0 WORLD_SIZE=2 python $GEN/d1_train_env.py"
capture $LOGS/D1/keyerror-local-rank.log "python $GEN/d1_train_env.py --read-local-rank"
# WORLD_SIZE=2 but only one process started by hand: the store waits for the missing client
capture $LOGS/D1/world-size-2-one-process-store-timeout.log \
  "MASTER_ADDR=127.0.0.1 MASTER_PORT=29713 RANK=0 WORLD_SIZE=2 python $GEN/d1_store_wait.py"
