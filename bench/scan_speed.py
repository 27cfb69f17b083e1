"""Speed and memory of `gpudoctor diagnose` against ripgrep with the same signature set, in one run.

Three measurements (issue 3):
  big    a generated NCCL_DEBUG=INFO-style log (default 1 GiB) with planted errors:
         diagnose wall time / `rg -f patterns` wall time (target <= 1.0), and diagnose peak RSS (< 200 MB)
  ranks  1,024 per-rank files of 1 MiB: diagnose / rg over the same files (target <= 1.5)
  small  a 10 KB log: diagnose / `python -c pass` (target <= 6)
Needs ripgrep (`apt-get install ripgrep`). Files are generated under --workdir (default a temp dir).
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INIT_LINES = [
    "{host}:{pid}:{tid} [{dev}] NCCL INFO NCCL_P2P_LEVEL set by environment to NVL",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.{dev}<0>",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO comm 0x55d1c2a0 rank {dev} nranks 8 cudaDev {dev} busId 41000 - Init COMPLETE",
]
NCCL_LINES = [
    "{host}:{pid}:{tid} [{dev}] NCCL INFO Channel {ch:02d}/32 :    0   1   2   3   4   5   6   7",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO Ring {ch:02d} : {dev}[{dev}] -> {nxt}[{nxt}] via P2P/IPC/read",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO Trees [{ch}] {nxt}/-1/-1->{dev}->{prv} [{ch}] -1/-1/-1->{dev}->{nxt}",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO Connected all rings",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO AllReduce: opCount {op:x} sendbuff 0x7f{op:08x} recvbuff 0x7f{op:08x} count 262144 datatype 7 op 0 root 0 comm 0x55d1c2a0 [nranks=8] stream 0x55d1",
    "[rank{dev}]:[I1122 01:{mm:02d}:{ss:02d}.{us:06d} {pid} torch/distributed/run.py:874] step {op} loss {loss:.4f} lr 0.0003",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO 32 coll channels, 32 nvls channels, 32 p2p channels, 32 p2p channels per peer",
]
PLANTED = [
    "{host}:{pid}:{tid} [{dev}] NCCL INFO NET/Socket : Using [0]docker0:172.17.0.1<0>",
    "[rank3]:[E1122 01:58:03.026000 8038 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=57, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=1800000) ran "
    "for 1800093 milliseconds before timing out.",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO comm 0x55d1c2a0 rank {dev} nranks 8 cudaDev {dev} busId 41000 - Init COMPLETE",
]


def make_block(rng: random.Random, size: int, init: bool = False) -> bytes:
    """NCCL_DEBUG=INFO chatter and training-step lines; init lines (env, NET, Init COMPLETE) only once."""
    lines, total = [], 0
    if init:
        for dev in range(8):
            for tmpl in INIT_LINES:
                lines.append(tmpl.format(host=f"node-{dev // 4}", pid=12000 + dev, tid=12100 + dev, dev=dev))
    while total < size:
        dev = rng.randrange(8)
        line = rng.choice(NCCL_LINES).format(
            host=f"node-{dev // 4}", pid=12000 + dev, tid=12100 + dev, dev=dev, nxt=(dev + 1) % 8,
            prv=(dev - 1) % 8, ch=rng.randrange(32), op=rng.randrange(1 << 20), mm=rng.randrange(60),
            ss=rng.randrange(60), us=rng.randrange(10**6), loss=rng.random() * 4,
        )
        lines.append(line)
        total += len(line) + 1
    return ("\n".join(lines) + "\n").encode()


def write_big(path: Path, size: int, rng: random.Random) -> None:
    block = make_block(rng, 4 << 20)
    written = 0
    with open(path, "wb") as fh:
        fh.write(make_block(rng, 0, init=True))
        while written < size:
            fh.write(block)
            written += len(block)
            if rng.random() < 0.05:
                planted = rng.choice(PLANTED).format(host="node-0", pid=12003, tid=12103, dev=3) + "\n"
                fh.write(planted.encode())
                written += len(planted)


def patterns_file(workdir: Path) -> Path:
    from gpudoctor.engine.diagnose import pattern_set
    from gpudoctor.kb.catalog import load_catalog

    pset = pattern_set(load_catalog())
    path = workdir / "patterns.txt"
    lines = []
    for p in pset.patterns:
        if p.signature is not None and p.signature.literal is not None:
            regex = rust_escape(p.signature.literal)  # Python's re.escape output is not Rust regex syntax
        else:
            regex = p.regex.replace("(?i)", "")
        lines.append(f"(?i){regex}" if p.caseless else regex)
    path.write_text("\n".join(lines) + "\n")
    return path


def rust_escape(text: str) -> str:
    return "".join("\\" + c if c in "\\.+*?()|[]{}^$#&-~" else c for c in text)


ENV = dict(os.environ)
ENV.pop("PYTHONDONTWRITEBYTECODE", None)  # measure with cached bytecode, as users run it


def run(argv: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one command, its output discarded."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss


def best_of(n: int, argv: list[str]) -> tuple[float, int]:
    runs = [run(argv) for _ in range(n)]
    return min(t for t, _ in runs), max(m for _, m in runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024, help="size of the big log (default 1024)")
    ap.add_argument("--files", type=int, default=1024, help="per-rank files for the ranks case (default 1024)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per command; the fastest counts (default 3)")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--only", choices=("big", "ranks", "small"), action="append")
    args = ap.parse_args()
    rg = shutil.which("rg")
    if rg is None:
        print("ripgrep (rg) is not installed: apt-get install ripgrep", file=sys.stderr)
        return 2
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gpudoctor-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    pats = patterns_file(workdir)
    gd = [sys.executable, "-m", "gpudoctor", "diagnose", "--no-color"]
    only = set(args.only or ("big", "ranks", "small"))
    ok = True

    if "big" in only:
        big = workdir / f"nccl-{args.size_mb}mb.log"
        if not big.exists() or big.stat().st_size < args.size_mb << 20:
            write_big(big, args.size_mb << 20, rng)
        t_gd, rss = best_of(args.repeat, gd + [str(big)])
        t_rg, _ = best_of(args.repeat, [rg, "-n", "-f", str(pats), str(big)])
        ratio = t_gd / t_rg
        gbps = big.stat().st_size / t_gd / 1e9
        print(f"big   {big.stat().st_size / 2**20:,.0f} MiB: diagnose {t_gd:.2f} s ({gbps:.2f} GB/s), rg {t_rg:.2f} s, "
              f"ratio {ratio:.2f} (target <= 1.0); diagnose peak RSS {rss / 1024:.0f} MiB (target < 200)")
        ok &= ratio <= 1.0 and rss < 200 * 1024

    if "ranks" in only:
        rdir = workdir / "ranks"
        if not rdir.is_dir() or len(list(rdir.iterdir())) != args.files:
            shutil.rmtree(rdir, ignore_errors=True)
            rdir.mkdir()
            block = make_block(rng, 1 << 20)
            for r in range(args.files):
                head = make_block(rng, 0, init=True)
                tail = PLANTED[1].replace("Rank 3", f"Rank {r}") if r != 17 else "RuntimeError: CUDA error: an illegal memory access was encountered"
                (rdir / f"rank{r}.log").write_bytes(head + block + tail.encode() + b"\n")
        t_gd, _ = best_of(args.repeat, gd + [str(rdir)])
        t_rg, _ = best_of(args.repeat, [rg, "-n", "-f", str(pats), str(rdir)])
        ratio = t_gd / t_rg
        print(f"ranks {args.files} files x 1 MiB: diagnose {t_gd:.2f} s, rg {t_rg:.2f} s, ratio {ratio:.2f} (target <= 1.5)")
        ok &= ratio <= 1.5

    if "small" in only:
        small = workdir / "small.log"
        small.write_bytes(make_block(rng, 10_000, init=True) + PLANTED[1].encode() + b"\n")
        subprocess.run(gd + [str(small)], stdout=subprocess.DEVNULL, check=False, env=ENV)  # warm the caches
        base = [run([sys.executable, "-c", "pass"])[0] for _ in range(max(9, args.repeat))]
        diag = [run(gd + [str(small)])[0] for _ in range(max(9, args.repeat))]
        ratio = statistics.median(diag) / statistics.median(base)
        print(f"small 10 KB: diagnose {statistics.median(diag) * 1000:.0f} ms, python -c pass "
              f"{statistics.median(base) * 1000:.0f} ms, ratio {ratio:.1f} (target <= 6)")
        ok &= ratio <= 6
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
