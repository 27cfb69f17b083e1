import torch
import torch.distributed as dist

dist.init_process_group("nccl")
model = torch.nn.Linear(4, 4).cuda()
for epoch in range(10):
    train_one_epoch(model)
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), f"ckpt-{epoch}.pt")
        dist.barrier()  # wait until the checkpoint is on disk
