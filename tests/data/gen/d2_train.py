"""D2 worker: prints the topology it was given and trains a few DDP steps."""
import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
print(f"[{socket.gethostname()} {os.environ.get('GLOO_SOCKET_IFNAME')}] RANK={rank} WORLD_SIZE={world} "
      f"LOCAL_RANK={os.environ.get('LOCAL_RANK')} GROUP_RANK={os.environ.get('GROUP_RANK')} "
      f"MASTER_ADDR={os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}", flush=True)
model = nn.parallel.DistributedDataParallel(nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(8, 16)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0:
        print(f"step {step} loss {loss.item():.4f} (global batch = {8 * world})", flush=True)
dist.destroy_process_group()
