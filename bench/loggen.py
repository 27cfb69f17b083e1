"""Seeded generator of realistic training logs for benchmarks: every line drawn afresh, no repeated blocks."""
from __future__ import annotations

import random
from pathlib import Path

KINDS = ("nccl", "steps", "mix")

_OPS = ("AllReduce", "AllGather", "ReduceScatter", "Broadcast")
_WORDS = ("loading shard", "saving metrics", "evaluating", "tokenizer loaded", "dataloader ready", "grad norm",
          "throughput", "checkpoint skipped", "scheduler step", "warmup done", "memory reserved")

# errors planted now and then, each from a catalogue entry's territory (the same ones in every run)
PLANTED = (
    "[rank3]:[E1122 01:58:03.026000 8038 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=57, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=1800000) ran "
    "for 1800093 milliseconds before timing out.",
    "node-0:12003:12103 [3] NCCL INFO NET/Socket : Using [0]docker0:172.17.0.1<0>",
    "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
    "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
)


def _nccl(r: random.Random) -> str:
    dev = r.randrange(8)
    node = r.randrange(64)
    head = f"gpu-node-{node:03d}:{10000 + r.randrange(50000)}:{10000 + r.randrange(50000)} [{dev}] NCCL INFO "
    k = r.randrange(8)
    if k == 0:
        return head + f"Channel {r.randrange(32):02d}/{r.choice((16, 24, 32))} :" + "".join(
            f" {(dev + i) % 8:3d}" for i in range(8))
    if k == 1:
        nxt = r.randrange(8)
        return head + f"Channel {r.randrange(32):02d}/0 : {dev}[{dev}] -> {nxt}[{nxt}] via P2P/{r.choice(('IPC', 'CUMEM', 'direct pointer'))}/read"
    if k == 2:
        return head + f"Trees [{r.randrange(32)}] {r.randrange(8)}/-1/-1->{dev}->{r.randrange(8)} [{r.randrange(32)}] -1/-1/-1->{dev}->{r.randrange(8)}"
    if k == 3:
        op = r.randrange(1 << 24)
        return head + (f"{r.choice(_OPS)}: opCount {op:x} sendbuff 0x7f{r.getrandbits(32):08x} recvbuff "
                       f"0x7f{r.getrandbits(32):08x} count {r.randrange(1, 1 << 22)} datatype {r.randrange(10)} op "
                       f"{r.randrange(4)} root 0 comm 0x{r.getrandbits(40):x} [nranks={r.choice((8, 16, 64, 512))}] stream 0x{r.getrandbits(40):x}")
    if k == 4:
        return head + f"{r.randrange(1, 64)} coll channels, {r.randrange(64)} nvls channels, {r.randrange(64)} p2p channels, {r.randrange(1, 8)} p2p channels per peer"
    if k == 5:
        return head + f"Connected all {r.choice(('rings', 'trees'))}"
    if k == 6:
        return head + f"comm 0x{r.getrandbits(40):x} rank {r.randrange(512)} nRanks 512 nNodes 64 localRanks 8 localRank {dev} MNNVL 0"
    return head + f"NVLS multicast support is {r.choice(('available', 'not available'))} on dev {dev}"


def _step(r: random.Random) -> str:
    rank = r.randrange(64)
    step = r.randrange(200000)
    k = r.randrange(4)
    if k == 0:
        return (f"[rank{rank}]:[I1122 {r.randrange(24):02d}:{r.randrange(60):02d}:{r.randrange(60):02d}.{r.randrange(10**6):06d} "
                f"{4000 + r.randrange(9000)} train.py:{r.randrange(40, 400)}] step {step} loss {r.random() * 4:.4f} "
                f"lr {r.random() * 1e-3:.2e} grad_norm {r.random() * 10:.3f}")
    if k == 1:
        return (f"2024-{r.randrange(1, 13):02d}-{r.randrange(1, 29):02d} {r.randrange(24):02d}:{r.randrange(60):02d}:"
                f"{r.randrange(60):02d},{r.randrange(1000):03d} - INFO - trainer - epoch {r.randrange(90)} step "
                f"{step}/{step + r.randrange(9999)} loss={r.random() * 4:.5f} tokens/s={r.randrange(10**6)}")
    if k == 2:
        return (f"{{'loss': {r.random() * 4:.4f}, 'grad_norm': {r.random() * 9:.4f}, 'learning_rate': "
                f"{r.random() * 1e-4:.3e}, 'epoch': {r.random() * 3:.2f}}}")
    return (f"[default{rank % 8}]:Epoch {r.randrange(90)}: {r.randrange(101)}%|{'#' * r.randrange(20)}| "
            f"{step}/{step + r.randrange(999)} [{r.randrange(60):02d}:{r.randrange(60):02d}<{r.randrange(60):02d}:"
            f"{r.randrange(60):02d}, {r.random() * 9:.2f}it/s, loss={r.random() * 4:.3f}, v_num={r.randrange(99)}]")


def _mix(r: random.Random) -> str:
    k = r.randrange(10)
    if k < 4:
        return _nccl(r)
    if k < 8:
        return _step(r)
    if k == 8:
        return f"INFO:{r.choice(('root', 'accelerate', 'deepspeed'))}:{r.choice(_WORDS)} {r.randrange(10**6)} in {r.random() * 99:.1f}s"
    return (f"/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py:{r.randrange(100, 900)}: "
            f"UserWarning: This DataLoader will create {r.randrange(2, 64)} worker processes in total.")


_LINE = {"nccl": _nccl, "steps": _step, "mix": _mix}


def generate(kind: str, size: int, seed: int = 7, plant_every: int = 5_000_000) -> bytes:
    """`size` bytes (a little over) of `kind` lines; a planted error about every `plant_every` bytes."""
    r = random.Random(seed)
    line = _LINE[kind]
    out: list[str] = []
    total, next_plant = 0, plant_every // 2
    while total < size:
        text = line(r)
        if total >= next_plant:
            text = r.choice(PLANTED)
            next_plant += plant_every
        out.append(text)
        total += len(text) + 1
    return ("\n".join(out) + "\n").encode()


def write(path: Path, kind: str, size: int, seed: int = 7, pool_bytes: int = 24 << 20) -> Path:
    """Write `size` bytes of `kind` lines quickly: a pool of distinct generated lines (24 MB by default,
    more than any CPU cache), then every 8 MB piece drawn from it line by line at random, so that no
    block ever repeats; a planted error about every 5 MB."""
    r = random.Random(seed)
    pool = generate(kind, pool_bytes, seed, plant_every=1 << 62).decode().split("\n")[:-1]
    mean = sum(map(len, pool)) / len(pool) + 1
    piece = 8 << 20
    with open(path, "wb") as fh:
        written = 0
        while written < size:
            lines = r.choices(pool, k=max(1, int(min(piece, size - written) / mean)))
            lines[r.randrange(len(lines))] = r.choice(PLANTED)
            data = ("\n".join(lines) + "\n").encode()
            fh.write(data)
            written += len(data)
    return path
