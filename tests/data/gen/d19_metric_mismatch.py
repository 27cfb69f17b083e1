"""D19 worker (no DDP): rank-dependent collectives, run under TORCH_DISTRIBUTED_DEBUG=DETAIL.

--mode shape : all_reduce of a per-rank prediction buffer whose length depends on the local shard
--mode op    : the last rank broadcasts its best checkpoint score while the others all_reduce
--mode dtype : one rank accumulates its metric in float64
--mode order : ranks call all_gather / all_reduce in a different order
"""
import argparse
import datetime
import os

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--mode", default="shape")
p.add_argument("--steps", type=int, default=6)
args = p.parse_args()

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
rank, world = dist.get_rank(), dist.get_world_size()
print(f"[rank{rank}] TORCH_DISTRIBUTED_DEBUG={os.environ.get('TORCH_DISTRIBUTED_DEBUG')} world={world}", flush=True)
w = torch.zeros(64)
for step in range(args.steps):
    g = torch.randn(64)
    dist.all_reduce(g)
    w -= 0.01 * g / world
    if rank == 0:
        print(f"step {step} |w|={w.norm():.4f}", flush=True)
# ---- evaluation ----
n_local = 100 + 7 * rank if args.mode == "shape" else 100
preds = torch.rand(n_local)
if args.mode == "shape":
    dist.all_reduce(preds)
elif args.mode == "op":
    score = torch.tensor([preds.mean().item()])
    if rank == world - 1:
        dist.broadcast(score, src=world - 1)
    else:
        dist.all_reduce(score)
elif args.mode == "dtype":
    acc = preds.double().mean().reshape(1) if rank == 1 else preds.mean().reshape(1)
    dist.all_reduce(acc)
elif args.mode == "order":
    counts = [torch.zeros(1) for _ in range(world)]
    total = torch.tensor([float(n_local)])
    if rank % 2 == 0:
        dist.all_gather(counts, total)
        dist.all_reduce(total)
    else:
        dist.all_reduce(total)
        dist.all_gather(counts, total)
print(f"[rank{rank}] eval done", flush=True)
dist.destroy_process_group()
