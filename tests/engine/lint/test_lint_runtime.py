"""A D21 finding is a real deadlock: the flagged script hangs on two gloo ranks, its correct twin finishes."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpudoctor.engine.lint import lint_paths

pytest.importorskip("torch")
DATA = Path(__file__).resolve().parents[2] / "data" / "lint"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_two_ranks(script: Path, timeout: float) -> list[int | None]:
    """Start ranks 0 and 1 as child processes; the exit codes, None for a rank still running at the timeout."""
    port = _free_port()
    procs = []
    for rank in (0, 1):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "EPOCHS": "2"}
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True))
    deadline = time.monotonic() + timeout
    codes: list[int | None] = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append(None)
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return codes


def test_flagged_script_deadlocks_and_its_twin_completes():
    buggy = DATA / "buggy" / "d21_early_return_then_barrier.py"
    fixed = DATA / "correct" / "early_return_fixed.py"
    assert any(f.entry_id == "D21" and f.severity == "error" for f in lint_paths([str(buggy)]).findings)
    assert not [f for f in lint_paths([str(fixed)]).findings if f.severity == "error"]
    # the correct twin must finish; one more try with a fresh port if the first start lost a race for the port
    # picked by _free_port (another test can take it between the pick and the bind) or a rank was killed under load
    codes = _run_two_ranks(fixed, timeout=90)
    if codes != [0, 0]:
        codes = _run_two_ranks(fixed, timeout=90)
    assert codes == [0, 0]
    codes = _run_two_ranks(buggy, timeout=10)
    assert codes != [0, 0]  # rank 0 waits at a barrier rank 1 never reaches
    assert None in codes or any(c != 0 for c in codes)
