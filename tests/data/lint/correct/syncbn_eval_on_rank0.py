# Correct: a SyncBatchNorm model evaluated on rank 0 in eval mode (no statistics sync), through
# .module so DDP does not broadcast buffers.
import torch
import torch.distributed as dist
import torch.nn as nn


def evaluate(model, rank):
    net = nn.SyncBatchNorm.convert_sync_batchnorm(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)))
    if rank == 0:
        net.eval()
        with torch.no_grad():
            out = net(torch.randn(2, 3, 8, 8))
        print(out.mean())
        model.module(torch.randn(2, 3, 8, 8))
    dist.barrier()
