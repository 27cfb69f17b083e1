"""D8 worker (mp.spawn): a gated encoder branch skipped for text-only batches."""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


class MultiModal(nn.Module):
    def __init__(self):
        super().__init__()
        self.text_enc = nn.Embedding(100, 32)
        self.image_enc = nn.Conv2d(3, 8, 3)
        self.image_proj = nn.Linear(8, 32)
        self.classifier = nn.Linear(32, 4)

    def forward(self, tokens, images=None):
        h = self.text_enc(tokens).mean(1)
        if images is not None:
            h = h + self.image_proj(self.image_enc(images).mean((2, 3)))
        return self.classifier(h)


def worker(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = nn.parallel.DistributedDataParallel(MultiModal())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for it in range(1, 20):
        tokens = torch.randint(0, 100, (4, 12))
        images = torch.randn(4, 3, 16, 16) if it % 3 == 0 else None  # most batches are text-only
        loss = nn.functional.cross_entropy(model(tokens, images), torch.randint(0, 4, (4,)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"iter {it}: loss={loss.item():.3f} (images={'yes' if images is not None else 'no'})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    ws = int(sys.argv[1])
    mp.spawn(worker, args=(ws, int(sys.argv[2])), nprocs=ws)
