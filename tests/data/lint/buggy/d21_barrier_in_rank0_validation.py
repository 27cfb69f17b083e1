# Reproduces: validation run by the first process only, with a barrier (and a DDP forward) inside
# the rank-0 branch; the other processes never reach that barrier and the job hangs.
# Provenance: https://github.com/pytorch/pytorch/issues/54059
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        return self.bn(self.conv(x)).mean()


def train(gpu, world_size):
    dist.init_process_group("nccl", rank=gpu, world_size=world_size)
    torch.cuda.set_device(gpu)
    model = DDP(Net().cuda(gpu), device_ids=[gpu])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        loss = model(torch.randn(4, 3, 16, 16, device=gpu))
        loss.backward()
        opt.step()
        if gpu == 0:
            with torch.no_grad():
                val = model(torch.randn(4, 3, 16, 16, device=gpu))  # expect: D21
            print("val", val.item())
            dist.barrier()  # expect: D21


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
