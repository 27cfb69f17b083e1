import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    # each rank reads its own file, and the files differ in length
    shard = torch.load(f"shards/part-{rank}.pt")
    loader = DataLoader(shard, batch_size=16)
    model = DDP(torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        # one pass over this rank's shard
        for batch in loader:
            loss = model(batch).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    dist.destroy_process_group()


main()
