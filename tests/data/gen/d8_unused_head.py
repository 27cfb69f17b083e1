"""D8 worker: a two-head model where the auxiliary head only runs on some steps."""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class TwoHeadNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(32, 64), nn.ReLU())
        self.cls_head = nn.Linear(64, 10)
        self.aux_head = nn.Linear(64, 1)   # only used when use_aux=True

    def forward(self, x, use_aux=False):
        h = self.backbone(x)
        out = {"logits": self.cls_head(h)}
        if use_aux:
            out["aux"] = self.aux_head(h)
        return out


p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--steps", type=int, default=5)
args = p.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
local_rank = int(os.environ["LOCAL_RANK"])
model = DDP(TwoHeadNet())
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for epoch in range(args.epochs):
    for step in range(args.steps):
        x = torch.randn(8, 32)
        y = torch.randint(0, 10, (8,))
        out = model(x, use_aux=False)
        loss = nn.functional.cross_entropy(out["logits"], y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"[rank {rank}] epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
dist.destroy_process_group()
