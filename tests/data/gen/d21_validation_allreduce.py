"""D21 worker (mp.spawn): validation metric all_reduce placed inside `if rank == 0`."""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def validate(model, world_size):
    model.eval()
    with torch.no_grad():
        val_loss = torch.tensor(model(torch.randn(64, 10)).pow(2).mean().item())
    dist.all_reduce(val_loss, op=dist.ReduceOp.SUM)   # average over ranks
    model.train()
    return val_loss.item() / world_size


def run(rank, world_size, port, timeout_s):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(10, 10), nn.Tanh(), nn.Linear(10, 1)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(1, 4):
        t0 = time.time()
        for step in range(6):
            loss = model(torch.randn(32, 10)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"Epoch {epoch} | rank {rank} | train_loss {loss.item():.4f} | {time.time() - t0:.2f}s", flush=True)
        if rank == 0:
            v = validate(model.module, world_size)
            print(f"Epoch {epoch} | val_loss {v:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    ws, port, timeout_s = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    mp.spawn(run, args=(ws, port, timeout_s), nprocs=ws)
