"""A log file memory-mapped for viewing: a sparse line-start index built in the background, lines read on demand."""
from __future__ import annotations

import mmap
import os
import threading
from array import array
from bisect import bisect_left
from typing import Callable

BLOCK = 1 << 16  # the index keeps the newline count at each 64 KiB block: 16,384 numbers for 1 GiB
READ = 1 << 24  # indexing reads 16 MiB at a time with pread, so the mapping's pages never count as ours
FIRST_READ = 1 << 18  # the first read is small: the first screenful is readable within milliseconds
MAX_LINE_CHARS = 4096  # longer lines are cut for display (the whole line stays in the file)


class Cancelled(Exception):
    """The indexing was stopped from outside (the view closed, another file opened)."""


class LogFile:
    """Random access to the lines of a file of any size without reading it into memory.

    `index()` runs in a worker thread; lines already covered by the index can be read while it runs.
    Line numbers are 0-based here; the views show them 1-based, as the diagnosis evidence does.
    """

    def __init__(self, path: str, name: str | None = None):
        self.path = path
        self.name = name or path
        self._fh = open(path, "rb")
        self.size = os.fstat(self._fh.fileno()).st_size
        self._mm = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ) if self.size else None
        self._newlines = array("q", [0])  # newlines before block b; grows as indexing proceeds
        self._lock = threading.Lock()
        self.indexed_bytes = 0
        self.complete = self.size == 0

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        self._fh.close()

    # --- indexing ---------------------------------------------------------
    def index(self, cancelled: Callable[[], bool] = lambda: False,
              progress: Callable[[int, int], None] | None = None) -> int:
        """Count newlines per block over the whole file; returns the number of lines. Raises Cancelled."""
        fd = self._fh.fileno()
        offset = self.indexed_bytes
        while offset < self.size:
            if cancelled():
                raise Cancelled()
            want = READ if offset else min(READ, max(FIRST_READ, BLOCK))
            data = os.pread(fd, min(want, self.size - offset), offset)
            if not data:
                break
            counts = array("q")
            running = self._newlines[-1]
            for start in range(0, len(data), BLOCK):
                running += data.count(b"\n", start, start + BLOCK)
                counts.append(running)
            offset += len(data)
            with self._lock:
                self._newlines.extend(counts)
                self.indexed_bytes = offset
            if progress is not None:
                progress(self.known_lines, offset)
        self.complete = True
        return self.line_count

    @property
    def known_lines(self) -> int:
        """Lines that can be read now: every line ended within the indexed part (all of them once complete)."""
        if self.complete:
            return self.line_count
        return self._newlines[-1]

    @property
    def line_count(self) -> int:
        ends = self._newlines[-1]
        if not self.size:
            return 0
        last = self._mm[self.size - 1:self.size]
        return ends + (0 if last == b"\n" else 1)

    # --- reading ----------------------------------------------------------
    def line_start(self, line: int) -> int:
        """Byte offset where a 0-based line begins (the line must be within known_lines)."""
        if line <= 0:
            return 0
        with self._lock:
            newlines = self._newlines
            block = bisect_left(newlines, line) - 1  # newlines[block] < line <= newlines[block + 1]
            before = newlines[block]
        pos = block * BLOCK - 1
        find = self._mm.find
        for _ in range(line - before):
            pos = find(b"\n", pos + 1)
            if pos < 0:
                return self.size
        return pos + 1

    def lines(self, first: int, count: int) -> list[str]:
        """Up to `count` lines from `first`, decoded (bad bytes replaced), without their line endings."""
        if self._mm is None:
            return []
        last = min(first + count, self.known_lines)
        if first >= last:
            return []
        out: list[str] = []
        pos = self.line_start(first)
        find, mm = self._mm.find, self._mm
        for _ in range(last - first):
            end = find(b"\n", pos)
            stop = self.size if end < 0 else end
            raw = mm[pos:min(stop, pos + MAX_LINE_CHARS * 4)]
            text = raw.decode("utf-8", errors="replace").rstrip("\r")
            out.append(text[:MAX_LINE_CHARS])
            if end < 0:
                break
            pos = end + 1
        return out

    def __enter__(self) -> "LogFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
