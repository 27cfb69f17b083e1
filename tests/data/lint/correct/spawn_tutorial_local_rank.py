# Correct: single-node mp.spawn, where the spawned index is the local rank; a rank-0 helper that
# only writes files; a Lightning hook that only logs without syncing.
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def log_progress(epoch, loss):
    with open("progress.txt", "a") as fh:
        fh.write(f"{epoch} {loss}\n")


def worker(rank, world_size):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    model = DDP(torch.nn.Linear(4, 4).to(rank), device_ids=[rank])
    for epoch in range(2):
        loss = model(torch.randn(2, 4, device=rank)).sum()
        loss.backward()
        if rank == 0:
            log_progress(epoch, loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
