"""Fine-tune a small classifier with DDP, one process per GPU (started by torchrun)."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group(backend="nccl")
    rank = dist.get_rank()
    # pin this process to its GPU
    torch.cuda.set_device(rank)
    device = torch.device(f"cuda:{rank}")

    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    model = DDP(model, device_ids=[rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)

    for step in range(100):
        x = torch.randn(32, 128, device=device)
        y = torch.randint(0, 10, (32,), device=device)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
