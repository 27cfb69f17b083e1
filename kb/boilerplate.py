"""Text every failure of a kind carries whatever its cause: left out of what is searched."""
from __future__ import annotations

import re

# the advice torch (c10/cuda/CUDAException.cpp, 1.10-2.x) appends to every CUDA error, whatever the error: its words
# (device, compile, assertions) would count for whichever entry shares them, in a pasted title as in a log line
_CUDA_TRAILER = (r"Compile with .?TORCH_USE_CUDA_DSA.?\s*to enable device-side assertions\.?|"
                           r"CUDA kernel errors might be asynchronously reported at some other API call,? so the "
                           r"stacktrace below might be incorrect\.?|For debugging consider passing CUDA_LAUNCH_BLOCKING=1\.?")
_compiled: list[re.Pattern[str]] = []  # compiled on first use: most runs never search


def without_stock_advice(text: str) -> str:
    """text without torch's stock advice after a CUDA error (it names no cause)."""
    if "cuda" not in text.lower():
        return text
    if not _compiled:
        _compiled.append(re.compile(_CUDA_TRAILER, re.IGNORECASE))
    return _compiled[0].sub(" ", text)
