"""D9/D22 worker: ranks end up with different numbers of batches per epoch.

--data manual-shard : samples split with data[rank::world] and a custom batching loop (D22)
--data iterable     : IterableDataset reading a per-rank shard of different size (D9)
--data filter       : each rank drops "bad" samples after sharding -> uneven lengths (D9)
--data sampler      : DistributedSampler(drop_last=False) but the rank's loader uses a
                      different batch size from a per-rank config (D22)
"""
import argparse
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--data", default="manual-shard")
p.add_argument("--timeout", type=float, default=5)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--samples", type=int, default=1001)
p.add_argument("--bs", type=int, default=100)
p.add_argument("--sync-loss", action="store_true", help="all_reduce the epoch loss after the loop")
p.add_argument("--eval-seconds", type=float, default=8.0, help="local (no collective) validation time")
args = p.parse_args()

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
X, Y = torch.randn(args.samples, 16), torch.randint(0, 3, (args.samples,))


class ShardStream(IterableDataset):
    def __init__(self, rank):
        self.n = 200 + 37 * rank + rank % 2  # shard files differ in size (train-0000{rank}.jsonl)

    def __iter__(self):
        for i in range(self.n):
            yield X[i % args.samples], Y[i % args.samples]


def batches(epoch):
    if args.data == "manual-shard":
        idx = list(range(rank, args.samples, world))
        for i in range(0, len(idx), args.bs):
            b = idx[i:i + args.bs]
            yield X[b], Y[b]
    elif args.data == "iterable":
        yield from DataLoader(ShardStream(rank), batch_size=args.bs)
    elif args.data == "filter":
        idx = [i for i in range(rank, args.samples, world) if (X[i].abs().max() < 2.6)]
        for i in range(0, len(idx), args.bs):
            b = idx[i:i + args.bs]
            yield X[b], Y[b]
    elif args.data == "sampler":
        sampler = DistributedSampler(TensorDataset(X, Y), shuffle=True)
        sampler.set_epoch(epoch)
        bs = args.bs if rank == 0 else args.bs * 3 // 4   # per-rank config override
        yield from DataLoader(TensorDataset(X, Y), batch_size=bs, sampler=sampler)


model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(args.epochs):
    t0 = time.time()
    n_steps = 0
    for step, (x, y) in enumerate(batches(epoch)):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        n_steps += 1
        if step % 2 == 0:
            print(f"[rank{rank}] epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
    if args.sync_loss:
        epoch_loss = torch.tensor([loss.item()])
        dist.all_reduce(epoch_loss)
        if rank == 0:
            print(f"epoch {epoch} done: {n_steps} steps, mean loss {epoch_loss.item() / world:.4f}, "
                  f"{time.time() - t0:.1f}s", flush=True)
    else:
        print(f"[rank{rank}] epoch {epoch} done: {n_steps} steps in {time.time() - t0:.1f}s, running validation",
              flush=True)
        model.eval()
        with torch.no_grad():
            for _ in range(int(args.eval_seconds * 10)):
                model.module(torch.randn(256, 16))
                time.sleep(0.1)
        model.train()
dist.destroy_process_group()
