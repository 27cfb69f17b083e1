"""D23 worker: every rank saves the checkpoint to the same path, then reloads it to "verify".

--mode race      : all ranks torch.save() the same file concurrently, then each rank torch.load()s it
--mode no-wait   : only rank 0 saves (correct) but the other ranks load it immediately, without a barrier
"""
import argparse
import datetime
import os

import torch
import torch.distributed as dist
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--mode", default="race")
p.add_argument("--path", default="/tmp/gen_d23/checkpoint_last.pt")
p.add_argument("--width", type=int, default=1024)
p.add_argument("--epochs", type=int, default=3)
args = p.parse_args()

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
os.makedirs(os.path.dirname(args.path), exist_ok=True)
model = nn.parallel.DistributedDataParallel(nn.Sequential(*[nn.Linear(args.width, args.width) for _ in range(6)]))
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
for epoch in range(args.epochs):
    loss = model(torch.randn(4, args.width)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"[rank {rank}] epoch {epoch} loss {loss.item():.5f}", flush=True)
    if rank == 0:  # rank 0 also computes the validation score that goes into the checkpoint
        with torch.no_grad():
            val = sum(model.module(torch.randn(64, args.width)).pow(2).mean().item() for _ in range(3))
    else:
        val = None
    state = {"epoch": epoch, "model": model.module.state_dict(), "optim": opt.state_dict(),
             "val_loss": val, "rng": torch.get_rng_state()}
    if args.mode == "race" or rank == 0:
        torch.save(state, args.path)
        print(f"[rank {rank}] saved {args.path}", flush=True)
    ckpt = torch.load(args.path, map_location="cpu")
    print(f"[rank {rank}] verified checkpoint from epoch {ckpt['epoch']}", flush=True)
dist.destroy_process_group()
