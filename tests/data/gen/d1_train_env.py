"""D1 worker: a training script that expects a launcher (torchrun) to set the env contract.

Run with plain `python` (no RANK / WORLD_SIZE / MASTER_ADDR) to reproduce D1.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--backend", default="gloo")
p.add_argument("--read-local-rank", action="store_true",
               help="read LOCAL_RANK from os.environ before init (KeyError variant)")
args = p.parse_args()

print(f"[train] torch {torch.__version__}, backend={args.backend}", flush=True)
if args.read_local_rank:
    local_rank = int(os.environ["LOCAL_RANK"])
    print(f"[train] local_rank={local_rank}", flush=True)
dist.init_process_group(backend=args.backend, init_method="env://")
rank = dist.get_rank()
model = nn.Linear(16, 4)
model = nn.parallel.DistributedDataParallel(model)
print(f"[rank {rank}] initialised, world_size={dist.get_world_size()}", flush=True)
dist.destroy_process_group()
