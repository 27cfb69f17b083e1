# Reproduces: an evaluation helper that returns early on every rank but 0 and then waits at a
# barrier (the pattern behind the rank-0 validation hang); rank 0 waits alone.
# Provenance: https://github.com/pytorch/pytorch/issues/54059
import os

import torch
import torch.distributed as dist


def evaluate(model, loader):
    if dist.get_rank() != 0:
        return None
    model.eval()
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            total += torch.nn.functional.mse_loss(model.module(x), y).item()
    dist.barrier()  # expect: D21
    return total


def main():
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    data = [(torch.randn(2, 4), torch.randn(2, 1)) for _ in range(4)]
    for epoch in range(int(os.environ.get("EPOCHS", "2"))):
        for x, y in data:
            torch.nn.functional.mse_loss(model(x), y).backward()
        evaluate(model, data)


if __name__ == "__main__":
    main()
