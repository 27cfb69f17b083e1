# Reproduces: the model wrapped in DistributedDataParallel while its parameters are still on the CPU,
# and moved to the GPU afterwards.
# Provenance: https://github.com/pytorch/pytorch/issues/100243
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    ddp_model = DDP(model)  # expect: P2
    ddp_model.to(device)
    out = ddp_model(torch.randn(4, 16, device=device))
    out.sum().backward()
