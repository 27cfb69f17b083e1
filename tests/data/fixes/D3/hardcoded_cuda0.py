import argparse
import os

import torch
import torch.distributed as dist
from torch import nn


def build_model():
    return nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(10))


parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()

dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
device = "cuda:0"  # TODO: multi-gpu
model = build_model().to(device)
model = nn.parallel.DistributedDataParallel(model, device_ids=[0])
state = torch.load("pretrained.pt", map_location="cuda:0")
