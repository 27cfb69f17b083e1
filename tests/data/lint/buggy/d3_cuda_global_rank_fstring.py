# Reproduces: a torch.device built as cuda:{RANK}; correct on one node, an invalid ordinal on every
# node after the first.
# Provenance: https://github.com/openai/gpt-oss/issues/266
import os

import torch
import torch.distributed as dist


def init_distributed():
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    rank = int(os.environ.get("RANK", 0))
    dist.init_process_group("nccl", world_size=world_size, rank=rank)
    device = torch.device(f"cuda:{rank}")  # expect: D3
    torch.ones(1, device=device)
    return device
