"""Negative-case worker: an ordinary DDP (or single-process) training script that fails, or not, for
reasons that are not distributed-training failures.

--fail none      : trains and finishes cleanly
--fail import    : imports an optional dependency that is not installed
--fail keyerror  : a config/batch dict lookup with a wrong key
--fail shape     : a layer size that does not match the data
--fail datapath  : the dataset directory does not exist
--fail disk      : the checkpoint directory is on a full filesystem (pass --ckpt-dir)
"""
import argparse
import os

p = argparse.ArgumentParser()
p.add_argument("--fail", default="none")
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--ckpt-dir", default="/tmp/gen_neg_ckpt")
p.add_argument("--single", action="store_true", help="no torch.distributed at all")
args = p.parse_args()

if args.fail == "import":
    import deepspeed

import torch
import torch.distributed as dist
import torch.nn as nn

distributed = not args.single
if distributed:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
else:
    rank, world = 0, 1
cfg = {"lr": 0.05, "hidden": 64, "in_features": 20}
model = nn.Sequential(nn.Linear(cfg["in_features"] if args.fail != "shape" else 24, cfg["hidden"]), nn.ReLU(),
                      nn.Linear(cfg["hidden"], 2))
if distributed:
    model = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=cfg["learning_rate"] if args.fail == "keyerror" else cfg["lr"])
if args.fail == "datapath":
    files = sorted(os.listdir("/data/imagenet/train"))
os.makedirs(args.ckpt_dir, exist_ok=True)
for epoch in range(args.epochs):
    for step in range(5):
        x, y = torch.randn(16, 20), torch.randint(0, 2, (16,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if rank == 0:
        print(f"epoch {epoch} | loss {loss.item():.4f} | world_size {world}", flush=True)
        state = {"model": model.state_dict(), "big": torch.zeros(4_000_000) if args.fail == "disk" else None}
        torch.save(state, os.path.join(args.ckpt_dir, f"epoch{epoch}.pt"))
        print(f"saved {os.path.join(args.ckpt_dir, f'epoch{epoch}.pt')}", flush=True)
if distributed:
    dist.destroy_process_group()
if rank == 0:
    print("training finished", flush=True)
