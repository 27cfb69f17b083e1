"""FSDP1 on CPU with gloo (run by gpudoctor's D13 behaviour test): how many parameter all-gathers one training step
issues, which is what the sharding strategy trades against memory."""
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    gathers = []
    real = dist.all_gather  # FSDP1 gathers CPU shards with all_gather (all_gather_into_tensor on GPUs)

    def counted(*args, **kwargs):
        gathers.append(1)
        return real(*args, **kwargs)

    dist.all_gather = counted
    blocks = [torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()) for _ in range(4)]
    model = FSDP(
        torch.nn.Sequential(*blocks, torch.nn.Linear(64, 2)),
        auto_wrap_policy=ModuleWrapPolicy({torch.nn.Sequential}),
        device_id=torch.device("cpu"),
    )
    model(torch.randn(8, 64)).sum().backward()  # the first step also builds FSDP's lazy state
    gathers.clear()
    loss = model(torch.randn(8, 64)).sum()
    loss.backward()
    print(f"rank {dist.get_rank()} gathers {len(gathers)} loss {loss.item():.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
