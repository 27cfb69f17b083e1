"""The TUI's diagnosis in a child process of its own, so that esc and ctrl+q stop it at once whatever it is doing.

A thread cannot be interrupted: a scan stuck in one long regex search, or a decompression, would hold the
screen's worker (and, at exit, the interpreter) until it returned. The child runs in its own session and is
killed with its whole process group (the scan's pool workers included) when the worker is cancelled.

Parent and child speak in frames on the child's stdout, each an 8-byte length and a pickle:
("progress", bytes read so far), ("done", diagnosis, seconds), ("input-error", message). The child's own
prints go to its stderr, whose tail explains a child that died without a result. The job (catalogue, sources,
script, command) travels the other way on stdin, pickled. Both ends are this package: nothing from a log is
unpickled that the engine did not build.
"""
from __future__ import annotations

import atexit
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import time
from typing import Callable

from gpudoctor.engine.sources import InputError

CHILD = [sys.executable, "-m", "gpudoctor.tui.diagnose_child"]
POLL_S = 0.1  # how often the parent looks at the cancel flag while the child works
PROGRESS_EVERY_S = 0.1
_HEADER = struct.Struct(">Q")

_live: set[int] = set()  # process group ids of running children, killed if the TUI exits without cancelling
_live_lock = threading.Lock()


class Cancelled(Exception):
    """The worker was cancelled and the child's process group killed."""


class ChildFailed(Exception):
    """The child ended without a result; the message says how, with the last line it wrote to stderr."""


def run_diagnosis(job: dict, progress: Callable[[int], None] | None = None):
    """The diagnosis itself, in whichever process runs it: (Diagnosis, seconds)."""
    from gpudoctor.engine.diagnose import diagnose

    start = time.perf_counter()
    result = diagnose(job["catalog"], job["sources"], progress=progress)
    if job.get("script") or job.get("cmd"):  # the script and the command as witnesses: a cause both show is confident
        from gpudoctor.engine.corroborate import corroborate, gather

        result = corroborate(result, gather(job.get("script"), job.get("cmd"))[0], job["catalog"])
    return result, time.perf_counter() - start


def can_use_child() -> bool:
    """A child needs process groups and select() on pipes: POSIX."""
    return os.name == "posix" and hasattr(os, "killpg")


def diagnose(job: dict, *, cancelled: Callable[[], bool], progress: Callable[[int], None]):
    """(Diagnosis, seconds): in a child where there are process groups, else in this thread, which then sees a
    cancel only at the scan's next progress report. Raises Cancelled, InputError or ChildFailed."""
    if can_use_child():
        return diagnose_in_child(job, cancelled=cancelled, progress=progress)
    done = [0]

    def counted(n: int) -> None:
        if cancelled():
            raise Cancelled()
        done[0] += n
        progress(done[0])

    return run_diagnosis(job, counted)


def diagnose_in_child(job: dict, *, cancelled: Callable[[], bool], progress: Callable[[int], None]):
    """Run run_diagnosis(job) in a child; (Diagnosis, seconds). Raises Cancelled, InputError or ChildFailed.

    progress gets the bytes read so far, as the child reports them. Whatever happens, nothing is left running.
    """
    payload = pickle.dumps(dict(job, parent=os.getpid()), protocol=pickle.HIGHEST_PROTOCOL)
    try:
        proc = subprocess.Popen(CHILD, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as exc:
        raise ChildFailed(f"could not start the diagnosis process: {exc}") from exc
    with _live_lock:
        _live.add(proc.pid)
    try:
        return _talk(proc, payload, cancelled, progress)
    finally:
        _end(proc)


def _talk(proc: subprocess.Popen, payload: bytes, cancelled, progress):
    from gpudoctor.probes.runner import open_pipes, pump

    out, err = bytearray(), bytearray()
    pending = memoryview(payload)
    sel = open_pipes(proc, out, err)
    try:
        while True:
            if cancelled():
                raise Cancelled()
            if proc.stdout not in sel.get_map():
                break  # the child closed its result channel: it has said all it will
            for key, _ in sel.select(timeout=POLL_S):
                pending = pump(sel, key, proc, pending, err)
                for frame in _frames(out):
                    if frame[0] == "progress":
                        progress(frame[1])
                    elif frame[0] == "done":
                        return frame[1], frame[2]
                    elif frame[0] == "input-error":
                        raise InputError(frame[1])
    finally:
        sel.close()
    proc.wait()
    raise ChildFailed(_how_it_ended(proc.returncode, err))


def _frames(buffer: bytearray):
    """Complete frames at the front of buffer, removed from it as they are read."""
    while len(buffer) >= _HEADER.size:
        (size,) = _HEADER.unpack_from(buffer)
        if len(buffer) < _HEADER.size + size:
            return
        body = bytes(buffer[_HEADER.size:_HEADER.size + size])
        del buffer[:_HEADER.size + size]
        yield pickle.loads(body)


def _how_it_ended(code: int | None, err: bytes) -> str:
    from gpudoctor.probes.runner import signal_name

    how = f"died from {signal_name(-code)}" if code is not None and code < 0 else f"exited with code {code} and no result"
    lines = [line for line in err.decode("utf-8", "replace").splitlines() if line.strip()]
    return f"the diagnosis process {how}" + (f": {lines[-1].strip()[:200]}" if lines else "")


def _end(proc: subprocess.Popen) -> None:
    """Stop the child and its process group (its scan workers too), reap it, and forget it."""
    from gpudoctor.probes.runner import end_group

    end_group(proc)
    with _live_lock:
        _live.discard(proc.pid)


@atexit.register
def _kill_live() -> None:
    """A TUI that exits with a diagnosis still running leaves no child behind (they are in other sessions)."""
    with _live_lock:
        groups = list(_live)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


# --- the child side ---------------------------------------------------------------------------------------
def _send(channel, frame: tuple) -> None:
    body = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
    channel.write(_HEADER.pack(len(body)) + body)
    channel.flush()


def main() -> None:
    # Frames travel over the original stdout; anything printed later lands on stderr and cannot corrupt them.
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    job = pickle.load(sys.stdin.buffer)
    parent = job.get("parent")
    done, last = [0], [0.0]

    def progress(n: int) -> None:
        done[0] += n
        now = time.monotonic()
        if now - last[0] < PROGRESS_EVERY_S:
            return
        last[0] = now
        if parent is not None and os.getppid() != parent:  # the TUI is gone: stop, scan workers included
            os.killpg(0, signal.SIGKILL)
        _send(channel, ("progress", done[0]))

    try:
        result, seconds = run_diagnosis(job, progress)
    except InputError as exc:
        _send(channel, ("input-error", str(exc)))
    else:
        _send(channel, ("done", result, seconds))
    channel.close()
    sys.stderr.flush()
    os._exit(0)  # skip teardown: nothing left to flush, and the pool's atexit hooks would only cost time


if __name__ == "__main__":
    main()
