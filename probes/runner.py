"""Run probes in child processes in their own sessions: a timeout kills the process group, a crash becomes Errored."""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Mapping

from gpudoctor.probes import hostinfo
from gpudoctor.probes.base import NEEDS, Probe, Result, errored, skipped

CHILD = [sys.executable, "-m", "gpudoctor.probes.child"]
GRACE_S = 1.0  # between SIGTERM and SIGKILL: long enough for a clean exit, short enough to not matter
LINGER_S = 0.3  # after the child exits, how long its output may still trickle in
STDERR_KEEP = 16_384

_live: dict[int, subprocess.Popen] = {}
_live_lock = threading.Lock()


def unmet_need(probe: Probe, options: Mapping) -> str | None:
    """Why a probe cannot run here, for the needs that are cheap to check without starting it."""
    for need in probe.needs:
        if need == "torch" and not hostinfo.torch_installed():
            return "torch is not installed in this environment"
        if need == "cuda" and not hostinfo.has_nvidia_driver(options):
            return "no NVIDIA driver (no /proc/driver/nvidia, no nvidia-smi)"
        if need == "root" and os.geteuid() != 0:
            return "needs root privileges"
        if need == "peer" and not options.get("peer"):
            return "needs a peer host: pass --peer HOST"
        if need not in NEEDS:
            return f"unknown need {need!r}"
    return None


def run_probe(probe: Probe, options: Mapping | None = None, timeout_s: float | None = None,
              env: Mapping[str, str] | None = None) -> Result:
    """Run one probe to completion or to its timeout; always returns a Result and leaves nothing running."""
    options = dict(options or {})
    reason = unmet_need(probe, options)
    if reason:
        return skipped(reason).with_run(probe.id, 0.0)
    timeout = float(timeout_s or probe.timeout_s)
    request = json.dumps({"target": probe.target, "options": options, "probe": probe.id}, default=str)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(CHILD, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, env=dict(env) if env is not None else None)
    except OSError as exc:
        return errored(f"could not start the probe process: {exc}").with_run(probe.id, 0.0)
    with _live_lock:
        _live[proc.pid] = proc
    try:
        out, err, timed_out = _communicate(proc, request.encode(), start + timeout)
    finally:
        end_group(proc)
        with _live_lock:
            _live.pop(proc.pid, None)
    duration = time.monotonic() - start
    tail = tuple(line for line in err.decode(errors="replace").strip().splitlines()[-6:] if line.strip())
    if timed_out:
        message = f"timed out after {timeout:g} s; its process group was killed"
        return errored(message, tail).with_run(probe.id, duration)
    try:
        return Result.from_dict(json.loads(out.decode())).with_run(probe.id, duration)
    except (ValueError, KeyError, TypeError):
        pass
    code = proc.returncode
    if code is not None and code < 0:
        message = f"the probe process died from {signal_name(-code)}"
    else:
        message = f"the probe process exited with code {code} and no result"
    return errored(message, tail).with_run(probe.id, duration)


def run_probes(probes: Iterable[Probe], options: Mapping | None = None, parallel: int = 4,
               timeout_s: float | None = None, on_done: Callable[[Result], None] | None = None,
               options_for: Callable[[Probe], Mapping] | None = None) -> list[Result]:
    """Run several probes, a few at a time; one crashing never stops the others. Results keep the given order.

    options_for, when given, supplies each probe's own options (a launched job gives each its store prefix).
    """
    probes = list(probes)
    previous = _install_signal_handlers()
    pool = ThreadPoolExecutor(max_workers=max(1, parallel))
    try:
        futures = [pool.submit(run_probe, p, options_for(p) if options_for else options, timeout_s)
                   for p in probes]
        results = []
        for probe, future in zip(probes, futures):
            try:
                result = future.result()
            except Exception as exc:  # the runner itself failed: still a row, never a crash of `check`
                result = errored(f"runner error: {type(exc).__name__}: {exc}").with_run(probe.id, 0.0)
            results.append(result)
            if on_done:
                on_done(result)
        return results
    except BaseException:
        # kill before waiting for the worker threads, or they would wait out each probe's timeout
        pool.shutdown(wait=False, cancel_futures=True)
        kill_all()
        raise
    finally:
        pool.shutdown(wait=True)
        _restore_signal_handlers(previous)


def kill_all() -> None:
    """Kill every probe process group still running (Ctrl-C, SIGTERM from a launcher)."""
    with _live_lock:
        procs = list(_live.values())
    for proc in procs:
        signal_group(proc.pid, signal.SIGKILL)


def open_pipes(proc: subprocess.Popen, out: bytearray, err: bytearray) -> selectors.BaseSelector:
    """A selector over a child's stdin (to feed, without blocking), stdout (into out) and stderr (into err)."""
    sel = selectors.DefaultSelector()
    os.set_blocking(proc.stdin.fileno(), False)
    sel.register(proc.stdin, selectors.EVENT_WRITE)
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    return sel


def pump(sel: selectors.BaseSelector, key, proc: subprocess.Popen, pending: memoryview, err: bytearray) -> memoryview:
    """Serve one ready pipe: write more of pending to stdin (closing it once all is written), or read a chunk into
    the buffer the pipe was registered with (keeping only stderr's tail). Returns what is left to write."""
    if key.fileobj is proc.stdin:
        try:
            pending = pending[os.write(proc.stdin.fileno(), pending):]
        except OSError:  # the child is gone before reading it all: its stderr says why
            pending = pending[:0]
        if not pending:
            sel.unregister(proc.stdin)
            proc.stdin.close()
        return pending
    chunk = os.read(key.fileobj.fileno(), 65536)
    if not chunk:
        sel.unregister(key.fileobj)
    else:
        key.data.extend(chunk)
        if key.data is err:
            del err[:-STDERR_KEEP]
    return pending


def _communicate(proc: subprocess.Popen, request: bytes, deadline: float) -> tuple[bytes, bytes, bool]:
    """Feed stdin, drain stdout/stderr until EOF, the deadline, or the child's exit plus a short linger."""
    out, err = bytearray(), bytearray()
    sel = open_pipes(proc, out, err)
    pending = memoryview(request)
    exited_at = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                return bytes(out), bytes(err), True
            if exited_at is None and _has_exited(proc.pid):
                exited_at = now
            if exited_at is not None and now - exited_at > LINGER_S:
                break  # a grandchild holds the pipes open; end_group sweeps it
            wait = min(deadline - now, 0.1 if exited_at is None else LINGER_S)
            for key, _ in sel.select(timeout=wait):
                pending = pump(sel, key, proc, pending, err)
    finally:
        sel.close()
    return bytes(out), bytes(err), False


def _has_exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it: its pid (and so its process group id) stays reserved."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def end_group(proc: subprocess.Popen) -> None:
    """Stop the child and everything in its process group, then reap the child."""
    if not _has_exited(proc.pid):
        signal_group(proc.pid, signal.SIGTERM)
        stop = time.monotonic() + GRACE_S
        while time.monotonic() < stop and not _has_exited(proc.pid):
            time.sleep(0.02)
    # Always sweep: ranks or commands the probe started may outlive it. The unreaped leader keeps the id ours.
    signal_group(proc.pid, signal.SIGKILL)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        try:
            if stream:
                stream.close()
        except OSError:
            pass
    proc.wait()


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _install_signal_handlers():
    """A SIGTERM or SIGHUP to us must not orphan the probe groups (they are in other sessions)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        kill_all()
        raise SystemExit(128 + signum)

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            previous[sig] = signal.signal(sig, handler)
        except (ValueError, OSError):
            pass
    return previous


def _restore_signal_handlers(previous) -> None:
    for sig, handler in (previous or {}).items():
        try:
            signal.signal(sig, handler)
        except (ValueError, OSError, TypeError):
            pass
