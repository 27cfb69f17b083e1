"""Timing for the tests that bound a cost against a yardstick measured in the same run."""
from __future__ import annotations

import gc
import time


def best_of(fn, repeat: int = 3, clock=time.perf_counter) -> float:
    """Best of `repeat` timings of fn(), with the objects already alive frozen out of the collector's view: late in a
    full test run the heap pytest keeps makes every full collection slow (one run measured lint at 10.8x its bound
    and one the opCount rule at 10x), where a fresh `gpudoctor` process has only its own heap."""
    gc.collect()
    gc.freeze()
    try:
        times = []
        for _ in range(repeat):
            started = clock()
            fn()
            times.append(clock() - started)
    finally:
        gc.unfreeze()
    return min(times)
