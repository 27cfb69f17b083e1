"""Segmentation fine-tune, one process per GPU started with mp.spawn; batch of 2 images per GPU."""
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torchvision.models.segmentation import fcn_resnet50


def worker(gpu, world_size):
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:23456", rank=gpu, world_size=world_size)
    torch.cuda.set_device(gpu)
    model = DDP(fcn_resnet50(num_classes=21).cuda(gpu), device_ids=[gpu])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for step in range(1000):
        images = torch.randn(2, 3, 512, 512, device=gpu)
        loss = model(images)["out"].mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    mp.spawn(worker, args=(torch.cuda.device_count(),), nprocs=torch.cuda.device_count())
