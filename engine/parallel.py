"""Scan big inputs on every core: whole files spread over worker processes, one huge file split at a newline."""
from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs a short paste's start-up 3-4 ms
    from typing import Callable

from gpudoctor.engine.scan import KEEP_FIRST, KEEP_LAST, MAX_WINDOWS, TAIL_LINES, Hit, PatternHits, Scanner, SourceScan
from gpudoctor.engine.sources import Source

SPLIT_FROM_BYTES = 64 << 20  # a plain file this big is cut in pieces, one per worker
PARALLEL_FROM_BYTES = 32 << 20  # below this a pool costs more than it saves
MAX_BATCH, MIN_BATCH = 64, 8  # files per batch


def workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class _Range:
    """A read-only stream over bytes [start, end) of a file."""

    def __init__(self, path, start: int, end: int):
        self._fh = open(path, "rb", buffering=0)
        self._fh.seek(start)
        self._left = end - start

    def readinto(self, view) -> int:
        if self._left <= 0:
            return 0
        view = view[: min(len(view), self._left)]
        n = self._fh.readinto(view)
        self._left -= n or 0
        return n or 0

    def close(self) -> None:
        self._fh.close()


def _split_points(path, size: int, parts: int) -> list[int]:
    """Byte offsets that cut the file into `parts` pieces, each cut just after a newline."""
    points = [0]
    with open(path, "rb") as fh:
        for k in range(1, parts):
            fh.seek(size * k // parts)
            chunk = fh.read(1 << 20)
            nl = chunk.find(b"\n")
            if nl < 0:
                continue  # one enormous line here: do not cut it
            cut = size * k // parts + nl + 1
            if cut > points[-1] and cut < size:
                points.append(cut)
    points.append(size)
    return points


_SCANNER: Scanner | None = None  # set in the parent before the pool forks, inherited by workers
_COUNTER = None


def _scan_range(job: tuple[str, str, int, int, bool]) -> SourceScan:
    name, path, start, end, rank_tail = job
    stream = _Range(path, start, end)
    try:
        return _SCANNER.scan(stream, name, _bump, end - start, rank_tail)
    finally:
        stream.close()


def _scan_files(job: list[tuple[Source, bool]]) -> list[SourceScan]:
    from gpudoctor.engine.sources import open_source

    out = []
    for source, rank_tail in job:
        stream = open_source(source)
        try:
            out.append(_SCANNER.scan(stream, source.name, _bump, None if source.compressed else source.size,
                                     rank_tail))
        finally:
            stream.close()
    return out


def _bump(n: int) -> None:
    if _COUNTER is not None:
        with _COUNTER.get_lock():
            _COUNTER.value += n


def merge(parts: list[SourceScan]) -> SourceScan:
    """One scan from consecutive pieces of the same source: line numbers shifted, hits kept first/last."""
    total = SourceScan(name=parts[0].name)
    offset = 0
    for part in parts:
        total.bytes += part.bytes
        total.binary |= part.binary
        total.cut_lines += part.cut_lines
        total.problem = total.problem or part.problem
        total.huge_lines |= part.huge_lines
        moved: dict[int, Hit] = {}  # one line can be a hit of several patterns: shift it once

        def shift(hit: Hit) -> Hit:
            if id(hit) not in moved:
                moved[id(hit)] = Hit(hit.line_no + offset, hit.text)
            return moved[id(hit)]

        for index, hits in part.hits.items():
            mine = total.hits.setdefault(index, PatternHits())
            seen = mine.count
            # keep the first KEEP_FIRST and the last KEEP_LAST over the whole sequence
            combined = mine.all() + [shift(h) for h in hits.all()]
            mine.count = seen + hits.count
            mine.first = combined[:KEEP_FIRST]
            mine.last = combined[KEEP_FIRST:][-KEEP_LAST:]
        for opener, line_no, lines in part.windows:
            if len(total.windows) < MAX_WINDOWS:
                total.windows.append((opener, line_no + offset, lines))
        if part.tail:
            total.tail = (total.tail + [(n + offset, t) for n, t in part.tail])[-TAIL_LINES:]
        for key, (n, t) in part.rank_tail.items():
            total.rank_tail.pop(key, None)
            total.rank_tail[key] = (n + offset, t)
        offset += part.lines
    total.lines = offset
    return total


def scan_parallel(scanner: Scanner, sources: list[Source], progress: Callable[[int], None] | None = None,
                  on_result: Callable[[int, SourceScan], None] | None = None, rank_tails: list[bool] | None = None):
    """Scans of the plain-file sources, in their order, using a pool of forked workers; None if not worth it.

    on_result(i, scan) is called in source order as soon as each source is complete, so that the
    caller's own work overlaps the workers' scanning. rank_tails[i]: whether source i wants each rank's last line.
    """
    tails = rank_tails if rank_tails is not None else [True] * len(sources)
    n = workers()
    size = sum(s.size or 0 for s in sources)
    if n < 2 or size < PARALLEL_FROM_BYTES or any(s.path is None or s.flight for s in sources):
        return None
    import multiprocessing as mp  # only past the size check: its import is 5 ms of a short paste's start-up

    try:
        ctx = mp.get_context("fork")
    except ValueError:  # no fork on this platform: one process it is
        return None
    jobs: list[tuple[list[int], object]] = []  # (source indexes, job)
    small: list[int] = []
    for i, s in enumerate(sources):
        if not s.compressed and (s.size or 0) >= SPLIT_FROM_BYTES:
            pts = _split_points(s.path, s.size, n)
            jobs += [([i], ("range", (s.name, str(s.path), a, b, tails[i]))) for a, b in zip(pts, pts[1:])]
        else:
            small.append(i)
    # many small files go out in batches: one round trip each rather than one per file (a round trip costs the
    # caller about a millisecond); the batches shrink towards the end so that the workers finish together
    k = 0
    while k < len(small):
        per_batch = max(MIN_BATCH, min(MAX_BATCH, (len(small) - k) // (2 * n)))
        batch = small[k : k + per_batch]
        jobs.append((batch, ("files", [(sources[i], tails[i]) for i in batch])))
        k += len(batch)
    global _SCANNER, _COUNTER
    _SCANNER, _COUNTER = scanner, ctx.Value("q", 0)
    try:
        return _run_pool(ctx, n, jobs, sources, progress, on_result)
    except Exception:  # a worker that could not read its file: the caller rescans in order and reports it
        return None
    finally:
        _SCANNER, _COUNTER = None, None


def _worker_init() -> None:
    """A scan worker leaves Ctrl-C to its parent (which tears the pool down, quietly), dies of a plain SIGTERM or
    SIGHUP instead of the parent's handlers it inherited, and on Linux dies with its parent if that one is killed."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the parent's handlers tear the pool down on SIGTERM and SIGHUP


def _run_pool(ctx, n, jobs, sources, progress, on_result):
    parts_left = {}
    for indexes, _ in jobs:
        for i in indexes:
            parts_left[i] = parts_left.get(i, 0) + 1
    by_source: dict[int, list[SourceScan]] = {}
    finished: list[SourceScan | None] = [None] * len(sources)
    shown = 0
    with ctx.Pool(min(n, len(jobs)), initializer=_worker_init) as pool:
        pending = [
            pool.apply_async(_scan_range if kind == "range" else _scan_files, (job,)) for _, (kind, job) in jobs
        ]
        for (indexes, (kind, _)), future in zip(jobs, pending):
            while not future.ready():
                future.wait(0.05)
                if progress is not None and _COUNTER.value > shown:
                    progress(_COUNTER.value - shown)
                    shown = _COUNTER.value
            result = future.get()
            for i, scan in zip(indexes, [result] if kind == "range" else result):
                by_source.setdefault(i, []).append(scan)
                parts_left[i] -= 1
                if parts_left[i] == 0:
                    parts = by_source.pop(i)
                    finished[i] = merge(parts) if len(parts) > 1 else parts[0]
                    if on_result is not None:
                        on_result(i, finished[i])
        if progress is not None and _COUNTER.value > shown:
            progress(_COUNTER.value - shown)
    return finished
