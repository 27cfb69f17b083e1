"""Text every failure of a kind carries whatever its cause: left out of what is searched."""
from __future__ import annotations

import functools
import re


@functools.cache
def _cuda_trailer() -> re.Pattern[str]:
    """The advice torch (c10/cuda/CUDAException.cpp, 1.10-2.x) appends to every CUDA error, whatever the error: its
    words (device, compile, assertions) would count for whichever entry shares them, in a title as in a log line.
    Compiled on first use: most runs never search."""
    return re.compile(r"Compile with .?TORCH_USE_CUDA_DSA.?\s*to enable device-side assertions\.?|"
                      r"CUDA kernel errors might be asynchronously reported at some other API call,? so the "
                      r"stacktrace below might be incorrect\.?|"
                      r"For debugging consider passing CUDA_LAUNCH_BLOCKING=1\.?",
                      re.IGNORECASE)


def without_stock_advice(text: str) -> str:
    """text without torch's stock advice after a CUDA error (it names no cause)."""
    return _cuda_trailer().sub(" ", text) if "cuda" in text.lower() else text
