"""Wall time of `gpudoctor show/search/list` as a ratio to `python -c pass`, measured in the same run.

Target (issue 2): each ratio <= 6. Runs are interleaved and the median of N is taken, so a noisy
shared machine moves both sides alike.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "show D8": ["show", "D8"],
    "search": ["search", "hangs at the last batch of the epoch"],
    "list": ["list"],
}


def timed(argv: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=21, help="runs per command (default 21)")
    parser.add_argument("--target", type=float, default=6.0)
    args = parser.parse_args()
    env = dict(os.environ, NO_COLOR="1", COLUMNS="80")
    # measure what users run: with cached bytecode (some shells export PYTHONDONTWRITEBYTECODE)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    exe = [sys.executable, "-m", "gpudoctor"]
    subprocess.run(exe + ["list"], stdout=subprocess.DEVNULL, env=env, check=True)  # warm the catalogue cache
    base, runs = [], {name: [] for name in COMMANDS}
    for _ in range(args.n):
        base.append(timed([sys.executable, "-c", "pass"], env))
        for name, argv in COMMANDS.items():
            runs[name].append(timed(exe + argv, env))
    ref = statistics.median(base)
    print(f"python -c pass: {ref * 1000:.1f} ms (median of {args.n})")
    worst = 0.0
    for name, times in runs.items():
        med = statistics.median(times)
        ratio = med / ref
        worst = max(worst, ratio)
        print(f"gpudoctor {name:<8} {med * 1000:7.1f} ms  ratio {ratio:4.1f}x  (target <= {args.target:g}x)")
    return 0 if worst <= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
