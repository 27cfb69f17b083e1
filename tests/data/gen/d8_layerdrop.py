"""D8 worker: stochastic depth / LayerDrop skips whole blocks, so their params get no grad."""
import logging
import os
import random

import torch
import torch.distributed as dist
import torch.nn as nn

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s rank%(rank)s %(message)s")


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return x + self.ff(self.norm(x))


class Encoder(nn.Module):
    def __init__(self, d=32, n=4, layerdrop=0.3):
        super().__init__()
        self.layers = nn.ModuleList(Block(d) for _ in range(n))
        self.out = nn.Linear(d, 2)
        self.layerdrop = layerdrop

    def forward(self, x):
        for layer in self.layers:
            if self.training and random.random() < self.layerdrop:
                continue
            x = layer(x)
        return self.out(x.mean(1))


dist.init_process_group("gloo")
rank = dist.get_rank()
log = logging.LoggerAdapter(logging.getLogger("train"), {"rank": rank})
random.seed(1234 + rank)
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(Encoder())
opt = torch.optim.Adam(model.parameters(), lr=3e-4)
log.info("model has %d parameters", sum(p.numel() for p in model.parameters()))
for step in range(1, 30):
    x = torch.randn(4, 16, 32)
    loss = nn.functional.cross_entropy(model(x), torch.randint(0, 2, (4,)))
    opt.zero_grad()
    loss.backward()
    opt.step()
    log.info("step %d loss %.4f", step, loss.item())
dist.destroy_process_group()
