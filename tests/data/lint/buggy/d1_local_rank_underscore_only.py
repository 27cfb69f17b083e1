# Reproduces: a fine-tuning script written for `python -m torch.distributed.launch` under torch 1.x parses only
# `--local_rank`; on torch 2.x the launcher passes `--local-rank=0` and every worker exits with
# "error: unrecognized arguments: --local-rank=0".
# Provenance: https://github.com/microsoft/LoRA/issues/79 (the script's own code is not copied; this is a sketch)
import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser(description="fine-tune a language model")
parser.add_argument("--train_data", required=True)
parser.add_argument("--local_rank", default=0, type=int)  # expect: D1
parser.add_argument("--lr", default=2e-4, type=float)
args = parser.parse_args()

torch.cuda.set_device(args.local_rank)
dist.init_process_group(backend="nccl")
