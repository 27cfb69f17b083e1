"""FSDP1 on CPU with gloo (run by gpudoctor's D12 behaviour test): how many FSDP units hold the model's parameters."""
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()) for _ in range(4)]
    model = FSDP(torch.nn.Sequential(*blocks, torch.nn.Linear(64, 2)), device_id=torch.device("cpu"))
    loss = model(torch.randn(8, 64)).sum()
    loss.backward()
    units = len(FSDP.fsdp_modules(model))
    print(f"rank {dist.get_rank()} fsdp units {units} loss {loss.item():.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
