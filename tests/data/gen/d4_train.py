"""D4 worker: a small DDP job that trains for a few seconds (long enough for a second job to collide)."""
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
steps = int(os.environ.get("STEPS", "12"))
for step in range(steps):
    x, y = torch.randn(16, 32), torch.randint(0, 2, (16,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0 and step % 4 == 0:
        print(f"step {step}/{steps} loss {loss.item():.4f}", flush=True)
    time.sleep(0.5)
if rank == 0:
    print("training done", flush=True)
dist.destroy_process_group()
