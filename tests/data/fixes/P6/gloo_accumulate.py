"""Gradient accumulation under DDP on CPU with gloo (a runnable twin for gpudoctor's P6 fix): counts the all-reduces."""
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

ACCUM = 4
reduced = []


def counting_hook(state, bucket):
    reduced.append(bucket.index())
    return allreduce_hook(state, bucket)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 2))
    model.register_comm_hook(None, counting_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1 + rank)
    batches = [(torch.randn(4, 8, generator=g), torch.randn(4, 2, generator=g)) for _ in range(8)]
    for step, (x, y) in enumerate(batches):
        loss = torch.nn.functional.mse_loss(model(x), y) / ACCUM
        loss.backward()
        if (step + 1) % ACCUM == 0:
            optimizer.step()
            optimizer.zero_grad()
    weights = " ".join(f"{v:.6f}" for v in model.module.weight.flatten().tolist())
    print(f"rank {rank} all-reduces {len(reduced)} weights {weights}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
