# Reproduces: every rank writes the same checkpoint file at the end of each epoch.
# Provenance: https://github.com/pytorch/pytorch/issues/73168
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    model = DDP(torch.nn.Linear(8, 8).cuda(local_rank), device_ids=[local_rank])
    opt = torch.optim.Adam(model.parameters())
    for epoch in range(3):
        loss = model(torch.randn(4, 8, device=local_rank)).sum()
        loss.backward()
        opt.step()
        torch.save({"model": model.module.state_dict(), "epoch": epoch}, "checkpoint.pt")  # expect: D23
