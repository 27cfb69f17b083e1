#!/usr/bin/env bash
# D23: checkpoint file races (every rank writes the same file / readers do not wait for the writer)
# and a checkpoint truncated by a kill during torch.save.
source "$(dirname "$0")/_common.sh"
W=$GEN/d23_ckpt_race.py

rm -rf /tmp/gen_d23 && mkdir -p /tmp/gen_d23
capture_until "PytorchStreamReader|EOFError|UnpicklingError" 6 $LOGS/D23/all-ranks-save-same-path-4-ranks.log \
  "rm -f /tmp/gen_d23/*; torchrun --nproc-per-node=4 --master-port=29801 $W --mode race --epochs 5"

rm -rf /tmp/gen_d23 && mkdir -p /tmp/gen_d23
capture $LOGS/D23/rank1-loads-without-barrier-first-epoch.log \
  "torchrun --nproc-per-node=2 --master-port=29802 $W --mode no-wait --width 2048"

# second run of the same job: an old checkpoint_last.pt exists and is being overwritten while rank 1 reads it
capture $LOGS/D23/rank1-loads-while-rank0-overwrites.log \
  "torchrun --nproc-per-node=2 --master-port=29803 $W --mode no-wait --width 2048"

# all ranks racing, 3 processes started by hand
rm -rf /tmp/gen_d23 && mkdir -p /tmp/gen_d23
capture_until "PytorchStreamReader|EOFError|UnpicklingError" 6 $LOGS/D23/all-ranks-save-same-path-3-processes.log \
  "rm -f /tmp/gen_d23/*; export MASTER_ADDR=127.0.0.1 MASTER_PORT=29804 WORLD_SIZE=3; RANK=1 python $W --mode race --width 1536 --epochs 5 & RANK=2 python $W --mode race --width 1536 --epochs 5 & RANK=0 python $W --mode race --width 1536 --epochs 5; wait"

# a save killed half-way (job preempted / walltime) and the next run resuming from it
rm -f /tmp/gen_d23/ckpt.pt
LOG=$LOGS/D23/resume-from-checkpoint-killed-mid-save.log
{
  echo "\$ python $GEN/d23_truncated_resume.py --save /tmp/gen_d23/ckpt.pt"
  python $GEN/d23_truncated_resume.py --save /tmp/gen_d23/ckpt.pt 2>&1 &
  P=$!
  while [ ! -s /tmp/gen_d23/ckpt.pt ] || [ "$(stat -c %s /tmp/gen_d23/ckpt.pt)" -lt 50000000 ]; do sleep 0.05; done
  kill -9 $P; wait $P 2>/dev/null
  echo "Killed"
} > $LOG 2>&1
capture_append $LOG "python $GEN/d23_truncated_resume.py --resume /tmp/gen_d23/ckpt.pt"
echo "wrote $LOG"
rm -rf /tmp/gen_d23
