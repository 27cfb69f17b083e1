"""Pre-train with DeepSpeed ZeRO-2; checkpoint every 1000 steps."""
import argparse

import deepspeed
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
parser = deepspeed.add_config_arguments(parser)
args = parser.parse_args()

deepspeed.init_distributed()
net = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
engine, _, _, _ = deepspeed.initialize(args=args, model=net, model_parameters=net.parameters())

for step in range(1, 20001):
    batch = torch.randn(16, 256, device=engine.device)
    loss = engine(batch).pow(2).mean()
    engine.backward(loss)
    engine.step()
    # only one process should write the checkpoint
    if dist.get_rank() == 0 and step % 1000 == 0:
        print(f"step {step}: saving", flush=True)
        engine.save_checkpoint("ckpt", tag=f"step{step}")
