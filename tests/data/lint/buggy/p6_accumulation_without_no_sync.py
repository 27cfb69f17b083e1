# Reproduces: gradient accumulation under DDP with backward() outside no_sync(): DDP all-reduces on
# every micro-step although the optimizer steps every K micro-steps.
# Provenance: https://github.com/pytorch/pytorch/issues/43201
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
model = DistributedDataParallel(torch.nn.Linear(512, 512).cuda(local_rank), device_ids=[local_rank])
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
accumulation_steps = 4
for step in range(1000):
    x = torch.randn(16, 512, device=local_rank)
    loss = model(x).pow(2).mean() / accumulation_steps
    loss.backward()  # expect: P6
    if (step + 1) % accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
