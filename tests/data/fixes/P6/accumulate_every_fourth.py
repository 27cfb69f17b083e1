"""Fine-tune with gradient accumulation under DDP (a test twin for gpudoctor's P6 fix)."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

ACCUM = 4


def train(loader, epochs=2):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(torch.nn.Linear(128, 10).cuda(), device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    criterion = torch.nn.CrossEntropyLoss()
    for epoch in range(epochs):
        for step, (x, y) in enumerate(loader):
            x, y = x.cuda(), y.cuda()
            # one micro-batch
            loss = criterion(model(x), y) / ACCUM
            loss.backward()
            if (step + 1) % ACCUM == 0:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)


if __name__ == "__main__":
    dist.init_process_group("nccl")
    train(loader=[])
