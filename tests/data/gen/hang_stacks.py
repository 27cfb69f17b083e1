"""Two gloo ranks that hang, each dumping its stack with faulthandler after a few seconds (tests/engine/test_rules.py).

usage: hang_stacks.py RANK WORLD MODE OUT_DIR PORT [DUMP_AFTER_S]
  save    rank 0 sits in save_checkpoint() while rank 1 waits in barrier()  (D21 by the stacks)
  desync  rank 0 waits in all_reduce(), rank 1 in barrier()                   (D19 by the stacks)
  same    both wait in barrier() for a rank that never comes                  (no cause by the stacks)
"""
import datetime, faulthandler, os, sys, time
import torch
import torch.distributed as dist


def save_checkpoint(step):
    time.sleep(60)  # rank 0 writes a large checkpoint while the others wait


def train_step(rank, mode):
    t = torch.ones(4)
    if mode == "desync":
        if rank == 0:
            dist.all_reduce(t)
        else:
            dist.barrier()
    else:
        dist.barrier()


def main():
    rank, world, mode, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[5])
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    log = open(os.path.join(out, f"rank{rank}.log"), "w")
    faulthandler.dump_traceback_later(float(sys.argv[6]) if len(sys.argv) > 6 else 4, exit=True, file=log)
    if mode == "save" and rank == 0:
        save_checkpoint(1)
    if mode == "same" and rank == 1:
        time.sleep(60)  # never reaches the barrier: both dumps of the others show the same collective
    train_step(rank, mode)


main()
