# Correct: the "first process prepares the data" pattern; every rank passes exactly one barrier
# (ranks > 0 before the work, rank 0 after it).
import torch


def load_and_cache_examples(args, tokenizer):
    if args.local_rank not in [-1, 0]:
        torch.distributed.barrier()
    features = [tokenizer(x) for x in ["a", "b"]]
    if args.local_rank == 0:
        torch.distributed.barrier()
    return features


def setup(args):
    if args.local_rank != -1:
        torch.distributed.init_process_group(backend="nccl")
        torch.distributed.barrier()
