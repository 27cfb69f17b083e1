"""D4 worker: mp.spawn launcher with a hard-coded MASTER_PORT (the pattern from many DDP tutorials)."""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = os.environ.get("PORT", "12355")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def train(rank, world_size, epochs):
    setup(rank, world_size)
    print(f"Running DDP example on rank {rank}.", flush=True)
    model = nn.parallel.DistributedDataParallel(nn.Linear(10, 5))
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    for epoch in range(epochs):
        for _ in range(5):
            opt.zero_grad()
            model(torch.randn(20, 10)).sum().backward()
            opt.step()
            time.sleep(0.3)
        if rank == 0:
            print(f"epoch {epoch} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    mp.spawn(train, args=(world_size, epochs), nprocs=world_size, join=True)
