"""Train an image classifier under DDP (a test twin for gpudoctor's P4 fix)."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train_one_epoch(model, train_loader, criterion, optimizer, device):
    model.train()
    for step, (images, labels) in enumerate(train_loader):
        images = images.to(device, non_blocking=True)
        outputs = model(images)
        loss = criterion(outputs, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    dist.init_process_group("nccl")
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    model = DDP(torch.nn.Linear(784, 10).to(device))
