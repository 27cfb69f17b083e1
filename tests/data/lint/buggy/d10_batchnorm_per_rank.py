# Reproduces: a detector with BatchNorm layers trained under DDP with a small per-GPU batch and no
# SyncBatchNorm; each rank normalises with its own few samples and the multi-GPU model converges
# worse than the single-GPU one.
# Provenance: https://github.com/LibreYOLO/libreyolo/pull/531
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2), nn.BatchNorm2d(32), nn.SiLU())
        self.head = nn.Conv2d(32, 85, 1)

    def forward(self, x):
        return self.head(self.stem(x))


dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
model = DDP(Backbone().cuda(), device_ids=[local_rank])  # expect: D10
