# Correct: save_checkpoint on every rank, rank 0 only logs.
import deepspeed
import torch
import torch.distributed as dist

engine, _, _, _ = deepspeed.initialize(model=torch.nn.Linear(4, 4), config={"train_batch_size": 8})
for step in range(10):
    engine.backward(engine(torch.randn(8, 4)).sum())
    engine.step()
    if step % 5 == 0:
        engine.save_checkpoint("ckpt")
        if dist.get_rank() == 0:
            print("saved", step)
