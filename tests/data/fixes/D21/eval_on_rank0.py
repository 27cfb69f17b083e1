"""Train a small classifier with DDP on CPU (gloo) and report the final validation accuracy."""
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def compute_accuracy(model, inputs, targets):
    """Accuracy over every rank's share of the validation set."""
    with torch.no_grad():
        correct = (model(inputs).argmax(dim=1) == targets).sum().float()
    counts = torch.stack([correct, torch.tensor(float(len(targets)))])
    dist.all_reduce(counts)  # sum over ranks
    return (counts[0] / counts[1]).item()


def main():
    timeout = timedelta(seconds=float(os.environ.get("TRAIN_DIST_TIMEOUT", "1800")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    val_x, val_y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    for epoch in range(2):
        for step in range(4):
            x, y = torch.randn(8, 8), torch.randint(0, 3, (8,))
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    if rank == 0:
        # only the main process reports
        print(f"final val accuracy {compute_accuracy(model, val_x, val_y):.3f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
