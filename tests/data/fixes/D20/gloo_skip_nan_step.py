"""Skip a step whose loss is not finite, on CPU with gloo (a runnable twin for gpudoctor's D20 fix): rank 1's third
batch is poisoned, so only rank 1 sees a NaN loss there."""
import datetime
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    timeout = datetime.timedelta(seconds=float(os.environ.get("TRAIN_DIST_TIMEOUT", "60")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1 + rank)
    batches = [(torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)) for _ in range(6)]
    if rank == 1:
        batches[2][0][0, 0] = float("nan")
    steps = 0
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(model(x), y)
        if torch.isnan(loss):
            continue
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
    dist.barrier()
    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    print(f"rank {rank} finished after {steps} steps checksum {checksum:.9f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
