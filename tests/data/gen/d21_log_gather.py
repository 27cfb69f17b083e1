"""D21 worker: rank 0 gathers per-rank throughput for its log line; the other ranks skip the gather."""
import datetime
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=int(os.environ.get("PG_TIMEOUT_S", "2"))))
rank, world = dist.get_rank(), dist.get_world_size()
w = torch.zeros(256, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
LOG_EVERY = 5
for step in range(1, 16):
    t0 = time.time()
    x = torch.randn(64, 256)
    loss = (x @ w - 1).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    dist.all_reduce(w.grad)          # manual data parallel
    w.grad /= world
    opt.step()
    if rank == 0 and step % LOG_EVERY == 0:
        stats = [None] * world
        dist.all_gather_object(stats, {"rank": rank, "samples_per_s": 64 / (time.time() - t0)})
        print(f"step {step:3d} loss {loss.item():.4f} throughput {sum(s['samples_per_s'] for s in stats):.1f}/s", flush=True)
if rank == 0:
    print("done", flush=True)
dist.destroy_process_group()
