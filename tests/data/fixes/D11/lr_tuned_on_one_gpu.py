"""Tuned on one GPU (batch 64, lr 0.1), then launched on eight with torchrun: the effective batch is 512."""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--warmup-lr", type=float, default=0.01)
    args = parser.parse_args()
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(torchvision_resnet50().cuda(), device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    head_optimizer = torch.optim.AdamW(model.module.fc.parameters(), args.warmup_lr + 0.001)
    train(model, optimizer, head_optimizer)


def torchvision_resnet50():
    import torchvision

    return torchvision.models.resnet50()


def train(model, optimizer, head_optimizer):
    ...


if __name__ == "__main__":
    main()
