"""Elastic training (torchrun --max-restarts=3): saves a checkpoint every epoch."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

CKPT = "checkpoints/snapshot.pt"


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(torch.nn.Linear(32, 32).cuda(), device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = build_loader()

    for epoch in range(90):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if dist.get_rank() == 0:
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, CKPT)
        dist.barrier()


if __name__ == "__main__":
    main()
