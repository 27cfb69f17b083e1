"""Rank 1 raises after init so torchrun prints its ChildFailedError summary (run under torchrun, 2 procs)."""
import logging
import os
import sys
import time

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

MODE = os.environ.get("GEN_MODE", "raise")


def load_batch(step):
    raise RuntimeError(f"bad batch at step {step}: shape mismatch [4, 3] vs [4, 5]")


@record
def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if MODE == "both":
        # rank 0: an implicit chain ("During handling ..."); rank 1: logging.exception, then re-raise
        if rank == 0:
            time.sleep(0.5)
            try:
                [][3]
            except IndexError:
                {}["missing_key"]
        try:
            load_batch(9)
        except RuntimeError:
            logging.exception("step 9 failed on rank %d", rank)
            raise
    if rank == 1:
        if MODE == "abort":
            os.abort()
        if MODE == "exit":
            sys.exit(3)
        try:
            load_batch(7)
        except RuntimeError as e:
            raise ValueError("training step failed") from e
    time.sleep(30)  # rank 0 waits to be killed by the agent
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
