"""Initialise a model after DDP wrapped it, on CPU with gloo (a runnable twin for gpudoctor's P5 fix)."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def init_weights(m):
    if isinstance(m, torch.nn.Linear):
        torch.nn.init.xavier_uniform_(m.weight)
        torch.nn.init.zeros_(m.bias)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1234 + rank)  # a per-rank seed, as for data augmentation
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model = DDP(model)
    # custom initialisation
    model.apply(init_weights)
    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    print(f"rank {rank} checksum {checksum:.9f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
