"""MN5 worker: no checkpoint resume, so every torchrun restart starts again from epoch 0.

--crash-rank R --crash-epoch E : rank R dies at epoch E, only on the first attempt (attempt 0)
--crash-always                 : rank R dies on every attempt (restarts exhausted)
--ckpt PATH                    : saves a checkpoint each epoch but never loads it on start
"""
import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--crash-rank", type=int, default=1)
p.add_argument("--crash-epoch", type=int, default=2)
p.add_argument("--crash-always", action="store_true")
p.add_argument("--ckpt", default="")
p.add_argument("--how", default="exception", choices=["exception", "exit", "kill"])
args = p.parse_args()

restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
rank = dist.get_rank()
if rank == 0:
    print(f"Starting training: world_size={dist.get_world_size()} "
          f"restart_count={restart} max_restarts={os.environ.get('TORCHELASTIC_MAX_RESTARTS')}", flush=True)
model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
start_epoch = 0  # TODO: resume from checkpoint
for epoch in range(start_epoch, args.epochs):
    for step in range(5):
        if (rank == args.crash_rank and epoch == args.crash_epoch and step == 2
                and (args.crash_always or restart == 0)):
            if args.how == "exception":
                raise RuntimeError(f"worker {rank}: lost connection to data server (simulated preemption)")
            if args.how == "exit":
                print(f"[rank {rank}] received preemption notice, exiting", flush=True)
                sys.exit(143)
            os.kill(os.getpid(), 9)
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.1)
    if rank == 0:
        print(f"epoch {epoch} | loss {loss.item():.4f}", flush=True)
        if args.ckpt:
            torch.save({"epoch": epoch, "model": model.module.state_dict()}, args.ckpt)
            print(f"saved checkpoint to {args.ckpt} (epoch {epoch})", flush=True)
dist.destroy_process_group()
if rank == 0:
    print("Training complete", flush=True)
