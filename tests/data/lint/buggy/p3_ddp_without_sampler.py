# Reproduces: DDP training with a plain shuffling DataLoader and no DistributedSampler; every rank
# iterates the whole dataset, so N GPUs repeat the same work.
# Provenance: https://github.com/PatrickHua/SimSiam/issues/16
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dataset = TensorDataset(torch.randn(1024, 32), torch.randn(1024, 1))
loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=2)  # expect: P3
model = DDP(torch.nn.Linear(32, 1).cuda(), device_ids=[local_rank])
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(5):
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x.cuda()), y.cuda()).backward()
        opt.step()
