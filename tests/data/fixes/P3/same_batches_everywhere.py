import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    data = TensorDataset(torch.randn(4096, 16), torch.randint(0, 2, (4096,)))
    # every rank builds the same loader
    train_loader = DataLoader(data, batch_size=64, shuffle=True, num_workers=2)
    model = DDP(torch.nn.Linear(16, 2).cuda(local_rank), device_ids=[local_rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        for x, y in train_loader:
            loss = torch.nn.functional.cross_entropy(model(x.cuda(local_rank)), y.cuda(local_rank))
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
