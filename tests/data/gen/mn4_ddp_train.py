"""MN4 worker (torchrun, one process per "node"): DDP training whose gradient buckets exceed the path MTU."""
import datetime
import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(os.environ.get("PG_TIMEOUT", "20"))))
rank, world = dist.get_rank(), dist.get_world_size()
print(f"[{socket.gethostname()}:{os.environ.get('GLOO_SOCKET_IFNAME')}] rank {rank}/{world} "
      f"group_rank={os.environ.get('GROUP_RANK')} local_rank={os.environ.get('LOCAL_RANK')}", flush=True)
ping = torch.tensor([float(rank)])
dist.all_reduce(ping)
print(f"rank {rank}: connectivity check all_reduce ok ({ping.item():.0f})", flush=True)
model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 10))
print(f"rank {rank}: wrapping model in DDP ({sum(p.numel() for p in model.parameters())} params)", flush=True)
model = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(5):
    loss = nn.functional.cross_entropy(model(torch.randn(32, 512)), torch.randint(0, 10, (32,)))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"rank {rank}: step {step} loss {loss.item():.4f}", flush=True)
dist.destroy_process_group()
