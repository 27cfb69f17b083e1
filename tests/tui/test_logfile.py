"""The memory-mapped log file: the sparse index gives the same lines as splitting the bytes, at any block boundary."""
from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from gpudoctor.tui import logfile as lf
from gpudoctor.tui.logfile import LogFile


def expected_lines(data: bytes) -> list[str]:
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    return [p.decode("utf-8", errors="replace").rstrip("\r")[: lf.MAX_LINE_CHARS] for p in parts]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=60), st.booleans())
def test_lines_match_a_plain_split(tmp_path_factory, chunks, trailing):
    data = b"\n".join(chunks) + (b"\n" if trailing and chunks else b"")
    path = tmp_path_factory.mktemp("lf") / "x.log"
    path.write_bytes(data)
    saved = lf.BLOCK, lf.READ
    lf.BLOCK, lf.READ = 16, 64  # tiny blocks: a few hundred bytes cross many block boundaries
    try:
        check(path, data)
    finally:
        lf.BLOCK, lf.READ = saved


def check(path, data: bytes) -> None:
    with LogFile(str(path)) as log:
        assert log.index() == len(expected_lines(data))
        assert log.lines(0, 10_000) == expected_lines(data)
        for first in range(0, log.line_count, 7):
            assert log.lines(first, 3) == expected_lines(data)[first:first + 3]


def test_partial_index_serves_the_lines_it_covers(tmp_path, monkeypatch):
    monkeypatch.setattr(lf, "READ", lf.BLOCK)  # index one block per step
    lines = [f"line {n} " + "x" * (n % 50) for n in range(20_000)]
    path = tmp_path / "big.log"
    path.write_text("\n".join(lines) + "\n")
    log = LogFile(str(path))
    steps = []

    def progress(known, done):
        steps.append(known)
        if len(steps) == 2:
            assert log.lines(known - 1, 1) == [lines[known - 1]]  # readable while the index is half built
            assert not log.complete

    log.index(progress=progress)
    assert steps == sorted(steps) and len(steps) > 5
    assert log.line_count == 20_000
    assert log.lines(19_999, 5) == [lines[-1]]
    assert log.lines(12_345, 2) == lines[12_345:12_347]


def test_cancel_stops_indexing(tmp_path, monkeypatch):
    monkeypatch.setattr(lf, "READ", lf.BLOCK)
    path = tmp_path / "c.log"
    path.write_bytes(b"abc\n" * 100_000)
    log = LogFile(str(path))
    calls = []
    try:
        log.index(cancelled=lambda: len(calls) > 0, progress=lambda *a: calls.append(a))
    except lf.Cancelled:
        pass
    else:
        raise AssertionError("not cancelled")
    assert not log.complete and log.indexed_bytes < os.path.getsize(path)


def test_empty_file_and_long_lines(tmp_path):
    empty = tmp_path / "e.log"
    empty.write_bytes(b"")
    with LogFile(str(empty)) as log:
        assert log.index() == 0 and log.lines(0, 5) == []
    long = tmp_path / "l.log"
    long.write_bytes(b"a" * 100_000 + b"\nend")
    with LogFile(str(long)) as log:
        assert log.index() == 2
        first, last = log.lines(0, 2)
        assert len(first) == lf.MAX_LINE_CHARS and last == "end"
