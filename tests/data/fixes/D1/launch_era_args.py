# Fine-tuning script written for `python -m torch.distributed.launch` on torch 1.x.
import argparse
import os

import torch
import torch.distributed as dist


def get_args():
    parser = argparse.ArgumentParser(description="finetune")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument('--local_rank', type=int, default=-1,
                        help="set by the launcher")  # the launcher fills this in
    parser.add_argument("--lr", type=float, default=3e-4)
    return parser.parse_args()


def main():
    args = get_args()
    torch.cuda.set_device(args.local_rank)
    dist.init_process_group(backend="nccl")
    print(f"rank {dist.get_rank()} of {dist.get_world_size()} on cuda:{args.local_rank}", os.getpid())


if __name__ == "__main__":
    main()
