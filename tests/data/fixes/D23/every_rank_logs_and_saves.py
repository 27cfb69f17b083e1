import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train(model, optimizer, loader, epochs, out_dir):
    for epoch in range(epochs):
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 100 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
        # checkpoint at the end of every epoch
        torch.save(model.module.state_dict(), os.path.join(out_dir, "last.pt"))


def main():
    print("starting")
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(torch.nn.Linear(16, 1).cuda(), device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters())
    loader = make_loader()
    print(f"world size {dist.get_world_size()}")
    train(model, optimizer, loader, epochs=10, out_dir="checkpoints")
    print("done")


if __name__ == "__main__":
    main()
