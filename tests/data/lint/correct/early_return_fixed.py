# Correct twin of buggy/d21_early_return_then_barrier.py: rank 0 evaluates alone, every rank then
# passes the same barrier.
import os

import torch
import torch.distributed as dist


def evaluate(model, loader):
    total = None
    if dist.get_rank() == 0:
        total = 0.0
        with torch.no_grad():
            for x, y in loader:
                total += torch.nn.functional.mse_loss(model.module(x), y).item()
    dist.barrier()
    return total


def main():
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    data = [(torch.randn(2, 4), torch.randn(2, 1)) for _ in range(4)]
    for epoch in range(int(os.environ.get("EPOCHS", "2"))):
        for x, y in data:
            torch.nn.functional.mse_loss(model(x), y).backward()
        evaluate(model, data)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
