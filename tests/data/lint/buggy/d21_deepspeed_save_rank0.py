# Reproduces: DeepSpeed's engine.save_checkpoint called on rank 0 only; it synchronises all ranks
# internally, so the save never finishes.
# Provenance: https://github.com/deepspeedai/DeepSpeed/issues/2993
import argparse

import deepspeed
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
parser = deepspeed.add_config_arguments(parser)
args = parser.parse_args()

deepspeed.init_distributed()
model = torch.nn.Linear(32, 32)
engine, optimizer, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=model.parameters())

for step in range(100):
    x = torch.randn(8, 32, device=engine.device)
    loss = engine(x).pow(2).mean()
    engine.backward(loss)
    engine.step()
    if step % 50 == 0 and dist.get_rank() == 0:
        engine.save_checkpoint("checkpoints", tag=f"step{step}")  # expect: D21
