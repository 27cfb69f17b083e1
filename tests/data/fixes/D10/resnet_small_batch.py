import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 32, 3, padding=1)
        self.bn = nn.BatchNorm2d(32)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.head(x.mean(dim=(2, 3)))


dist.init_process_group(backend="nccl")
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
model = Net().cuda()
# per-GPU batch of 4 images: BatchNorm statistics are noisy
model = DDP(model, device_ids=[local_rank])
