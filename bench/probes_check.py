"""`gpudoctor check` wall time against its 30-second budget, with the serial sum of its probes as reference.

Each run is a fresh `python -m gpudoctor check --json`; the probes' own durations (from the JSON) add up to
what running them one after another would cost, so the parallel speed-up is measured in the same run.

    python bench/probes_check.py [--runs 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

BUDGET_S = 30.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    walls, serial, slowest = [], [], []
    for _ in range(args.runs):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "gpudoctor", "check", "--json"], capture_output=True, text=True)
        walls.append(time.perf_counter() - start)
        data = json.loads(proc.stdout)
        durations = {r["probe"]: r["duration_s"] for r in data["results"]}
        serial.append(sum(durations.values()))
        slowest.append(max(durations.items(), key=lambda kv: kv[1]))
        errored = [r["probe"] for r in data["results"] if r["status"] == "errored"]
        if errored:
            print(f"  errored probes: {', '.join(errored)}")
    wall = statistics.median(walls)
    print(f"gpudoctor check, {args.runs} runs")
    print(f"  wall time        median {wall:6.2f} s   runs: {' '.join(f'{w:.2f}' for w in walls)}")
    print(f"  probes serially  median {statistics.median(serial):6.2f} s   (sum of each probe's own duration)")
    print(f"  slowest probe    {slowest[-1][0]} {slowest[-1][1]:.2f} s")
    print(f"  parallel speed-up {statistics.median(serial) / wall:5.2f}x")
    verdict = "ok" if wall <= BUDGET_S else "OVER"
    print(f"  ratio wall/budget {wall / BUDGET_S:5.2f}   (budget {BUDGET_S:g} s: {verdict})")
    return 0 if wall <= BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
