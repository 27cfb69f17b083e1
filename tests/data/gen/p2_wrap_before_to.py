"""P2 worker: the model is wrapped in DDP (with device_ids=[local_rank]) before being moved to its device."""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--variant", default="device-ids", choices=["device-ids", "output-device", "resnet-like"])
args = p.parse_args()

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("gloo")
print(f"rank {dist.get_rank()}: building model", flush=True)
if args.variant == "resnet-like":
    model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(16, 10))
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
else:
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
device = torch.device(f"cuda:{local_rank}")
if args.variant == "output-device":
    model = DDP(model, device_ids=[local_rank], output_device=local_rank)
else:
    model = DDP(model, device_ids=[local_rank])
model = model.to(device)  # too late: DDP already captured the CPU parameters
print(f"rank {dist.get_rank()}: model ready on {device}", flush=True)
