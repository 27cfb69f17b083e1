"""Ranks for the probes that need a process group: local ranks we start ourselves, or the job's ranks under torchrun."""
from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Iterable

from gpudoctor.probes.hostinfo import Job

_hosted_store = None  # kept alive for the life of the CLI process on rank 0 (see host_job_store)


@dataclass(frozen=True)
class RankOutcome:
    rank: int
    payload: dict | None  # what the rank function returned; None when it never answered
    exitcode: int | None  # negative: killed by that signal; None: still running when we gave up
    seconds: float | None = None  # from the start to its answer or its death; None if neither happened

    @property
    def died_from(self) -> str | None:
        if self.exitcode is not None and self.exitcode < 0 and self.payload is None:
            try:
                return signal.Signals(-self.exitcode).name
            except ValueError:
                return f"signal {-self.exitcode}"
        return None


def run_local(world: int, target: Callable[..., dict], args: tuple, timeout_s: float,
              method: str = "fork", wait_for: Iterable[int] | None = None) -> list[RankOutcome]:
    """Start `world` ranks running target(rank, world, *args) and collect what each returns.

    Ranks are plain children of this process, so the runner's process-group kill reaches them too.
    fork starts a rank in well under a second; CUDA needs spawn (a forked child cannot use CUDA).
    With wait_for, stop once those ranks have answered or died, and kill the rest.
    """
    import multiprocessing as mp
    from multiprocessing.connection import wait

    ctx = mp.get_context(method)
    procs, readers = [], {}
    start = time.monotonic()
    for rank in range(world):
        reader, writer = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_rank_entry, args=(target, rank, world, args, writer), daemon=True)
        proc.start()
        writer.close()
        procs.append(proc)
        readers[reader] = rank
    payloads: dict[int, dict] = {}
    finished: dict[int, float] = {}
    pending = set(range(world)) if wait_for is None else set(wait_for)
    reader_of = {rank: reader for reader, rank in readers.items()}
    watch = {reader: ("answer", rank) for reader, rank in readers.items()}
    watch.update({proc.sentinel: ("exit", rank) for rank, proc in enumerate(procs)})
    deadline = start + timeout_s
    while pending and watch and time.monotonic() < deadline:
        for ready in wait(list(watch), timeout=max(0.0, deadline - time.monotonic())):
            kind, rank = watch.pop(ready)
            reader = reader_of[rank]
            if rank not in payloads and (kind == "answer" or reader.poll()):
                try:
                    payloads[rank] = reader.recv()
                except (EOFError, OSError):  # it died before answering: its sentinel says when
                    if kind == "answer":
                        continue
            if kind == "answer" and rank not in payloads:
                continue
            finished.setdefault(rank, time.monotonic() - start)
            pending.discard(rank)
    for proc in procs:
        proc.join(timeout=0.5 if wait_for is None else 0.05)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=2)
    for reader in readers:
        reader.close()
    return [RankOutcome(r, payloads.get(r), procs[r].exitcode, finished.get(r)) for r in range(world)]


def _rank_entry(target, rank, world, args, writer) -> None:
    try:
        payload = target(rank, world, *args)
    except BaseException as exc:
        payload = {"rank": rank, "error": f"{type(exc).__name__}: {exc}"[:500]}
    try:
        writer.send(payload)
        writer.close()
    finally:
        # no interpreter teardown: gloo/NCCL threads can hang it, and the answer is already sent
        os._exit(0)


class StoreNotAnswering(TimeoutError):
    """Something accepts connections on MASTER_PORT but never answers as a torch store."""


CONNECT_GRACE_S = 5.0  # past the store's own timeout, which its handshake does not keep to


def connect_job_store(job: Job, prefix: str, timeout_s: float):
    """A client of the job's store (torchrun's agent hosts it) under a prefix of our own.

    A fresh prefix per probe keeps one probe's keys from meeting the next probe's process group. The connection is
    made in a daemon thread: a port held by a program that accepts and never answers keeps TCPStore's handshake
    waiting past its own timeout, in C++, where neither Ctrl-C nor SIGTERM reaches it; the thread is left behind
    and StoreNotAnswering says why.
    """
    import threading

    import torch.distributed as dist

    box: dict = {}

    def connect() -> None:
        try:
            box["store"] = dist.TCPStore(job.master_addr, job.master_port, job.world_size, False,
                                         timeout=timedelta(seconds=timeout_s))
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=connect, name="gpudoctor-store-connect", daemon=True)
    worker.start()
    limit = max(timeout_s * 2, timeout_s + CONNECT_GRACE_S)  # a loaded machine's name lookups and retries included
    worker.join(limit)
    if "error" in box:
        raise box["error"]
    if "store" not in box:
        raise StoreNotAnswering(f"{job.master_addr}:{job.master_port} accepts connections but did not answer as a "
                                f"torch store in {limit:.0f} s: another program may hold that port (`gpudoctor probe "
                                "port` names it)")
    return dist.PrefixStore(prefix, box["store"])


def host_job_store(job: Job, timeout_s: float = 60.0) -> bool:
    """Under a launcher without torchrun's agent store, rank 0 hosts the store the probe children meet at."""
    global _hosted_store
    if job.agent_store or job.rank != 0 or _hosted_store is not None:
        return False
    import torch.distributed as dist

    _hosted_store = dist.TCPStore(job.master_addr, job.master_port, job.world_size, True,
                                  timeout=timedelta(seconds=timeout_s), wait_for_workers=False)
    return True


def post_json(store, key: str, payload: Any) -> None:
    store.set(key, json.dumps(payload, default=str))


def collect_json(store, keys: list[str], timeout_s: float) -> tuple[dict[str, Any], list[str]]:
    """Read each key, waiting at most timeout_s in all; returns (found, missing)."""
    found, missing = {}, []
    deadline = time.monotonic() + timeout_s
    for key in keys:
        remaining = deadline - time.monotonic()
        try:
            store.wait([key], timedelta(seconds=max(0.05, remaining)))
            found[key] = json.loads(store.get(key).decode())
        except Exception:  # the store raises on timeout; a missing rank is a finding, not a crash
            missing.append(key)
    return found, missing
