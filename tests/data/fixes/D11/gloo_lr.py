"""DDP on CPU with gloo (run by gpudoctor's D11 behaviour test): the learning rate each rank's optimizer uses."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    before = model.module.weight.detach().clone()
    model(torch.ones(4, 8)).sum().backward()
    optimizer.step()
    moved = (before - model.module.weight.detach()).abs().sum().item()
    print(f"rank {dist.get_rank()} lr {optimizer.param_groups[0]['lr']} moved {moved:.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
