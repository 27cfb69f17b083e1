# Reproduces: the recipe's distributed set-up writes the rendezvous port into the environment itself, so a second
# training started on the same machine dies with "Address already in use" until the port is edited in the source.
# Provenance: https://github.com/k2-fsa/snowfall/issues/152 (a sketch of the pattern, not the project's code)
import os

import torch.distributed as dist
import torch.multiprocessing as mp


def setup_dist(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12354"  # expect: D4
    dist.init_process_group("nccl", rank=rank, world_size=world_size)


def run(rank, world_size):
    setup_dist(rank, world_size)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
