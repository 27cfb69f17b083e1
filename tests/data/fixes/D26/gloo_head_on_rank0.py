"""Replace a model's head on rank 0 only, then wrap it in DDP, on CPU with gloo (a runnable twin for gpudoctor's D26 fix)."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
    if rank == 0:
        # a new classification head for the fine-tuning task
        model.head = torch.nn.Linear(16, 3)
        print("rank 0 replaced the head", flush=True)
    try:
        model = DDP(model)
    except RuntimeError as exc:
        print(f"rank {rank} DDP refused: {str(exc).splitlines()[0][:120]}", flush=True)
        return
    print(f"rank {rank} wrapped {sum(p.numel() for p in model.parameters())} parameters", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
