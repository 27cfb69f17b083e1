"""D21 worker: checkpoint save gated on rank 0, with a dist.barrier() inside the gate."""
import datetime
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn

TIMEOUT = float(os.environ.get("PG_TIMEOUT", "3"))
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=TIMEOUT))
rank = dist.get_rank()
model = nn.parallel.DistributedDataParallel(nn.Linear(20, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
ckpt_dir = tempfile.mkdtemp(prefix="ckpt_")


def save_checkpoint(epoch):
    path = os.path.join(ckpt_dir, f"epoch{epoch}.pt")
    torch.save({"epoch": epoch, "model": model.module.state_dict()}, path)
    dist.barrier()  # "make sure the file is written before anyone continues"
    print(f"[rank {rank}] saved checkpoint {path}", flush=True)


for epoch in range(3):
    for step in range(4):
        loss = model(torch.randn(8, 20)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"[rank {rank}] epoch {epoch} finished, loss {loss.item():.4f}", flush=True)
    if rank == 0:
        save_checkpoint(epoch)
dist.destroy_process_group()
