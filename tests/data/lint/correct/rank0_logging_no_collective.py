# Correct: rank 0 alone prints and saves, the barrier is outside the branch; no collective is gated.
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    rank = dist.get_rank()
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = DDP(torch.nn.Linear(4, 1).cuda(), device_ids=[local_rank])
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for x, y in loader:
            torch.nn.functional.mse_loss(model(x.cuda()), y.cuda()).backward()
        loss = torch.tensor([0.0], device="cuda")
        dist.all_reduce(loss)
        if rank == 0:
            print(f"epoch {epoch} loss {loss.item()}")
            torch.save(model.module.state_dict(), "model.pt")
        dist.barrier()
