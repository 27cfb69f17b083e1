# Training script launched by mn5_launch.sh: it saves checkpoints but never loads one, so each
# elastic restart begins at step 0.
# Provenance: https://docs.pytorch.org/tutorials/beginner/ddp_series_fault_tolerance.html
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
model = DDP(torch.nn.Linear(8, 8).cuda(local_rank), device_ids=[local_rank])
for step in range(10_000):
    model(torch.randn(2, 8, device=local_rank)).sum().backward()
    if step % 100 == 0 and dist.get_rank() == 0:
        torch.save(model.module.state_dict(), "snapshot.pt")
