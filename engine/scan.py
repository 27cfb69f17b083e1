"""Stream a log of any size and bytes through the pattern set at constant memory, keeping matched lines."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import BinaryIO, Callable

from gpudoctor.engine.patterns import PatternSet

CHUNK = 8 << 20  # bytes read at a time
MAX_LINE = 1 << 20  # a longer line is scanned in pieces, so memory stays bounded
MAX_TEXT = 4096  # characters of a matched line kept as evidence (around the match)
KEEP_FIRST, KEEP_LAST = 8, 4  # matched lines kept per pattern: the first few and the most recent
WINDOW_LINES = 60  # lines kept after a traceback or a root-cause header
MAX_WINDOWS = 64  # per source: enough for every rank of an interleaved log
TAIL_LINES = 6

_ANSI_BYTES = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)")
_WINDOW_OPENERS = {"traceback", "root-cause", "mismatch"}


@dataclass
class Hit:
    """One line that a pattern matched, as decoded text (control characters intact: sanitise to print)."""

    line_no: int  # 1-based, in the source as given (decompressed)
    text: str


@dataclass
class PatternHits:
    count: int = 0
    first: list[Hit] = field(default_factory=list)
    last: list[Hit] = field(default_factory=list)

    def add(self, hit: Hit) -> None:
        self.count += 1
        if len(self.first) < KEEP_FIRST:
            self.first.append(hit)
        else:
            self.last.append(hit)
            if len(self.last) > KEEP_LAST:
                self.last.pop(0)

    def all(self) -> list[Hit]:
        return self.first + self.last


@dataclass
class SourceScan:
    """What one source (file, stdin, decompressed .gz) held, as far as the patterns are concerned."""

    name: str
    bytes: int = 0
    lines: int = 0
    hits: dict[int, PatternHits] = field(default_factory=dict)
    windows: list[tuple[str, int, list[str]]] = field(default_factory=list)  # (opener, line_no, lines)
    tail: list[tuple[int, str]] = field(default_factory=list)  # the last non-empty lines
    cut_lines: int = 0  # lines longer than MAX_LINE, scanned in pieces
    binary: bool = False  # NUL bytes seen


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


class Scanner:
    def __init__(self, patterns: PatternSet, *, use_hyperscan: bool = True):
        self.patterns = patterns
        self.db = patterns.hyperscan() if use_hyperscan else None
        self.engine = "hyperscan" if self.db is not None else "python"
        self._exact, self._folded, self._bare = patterns.literal_table()

    def scan(self, stream: BinaryIO, name: str, progress: Callable[[int], None] | None = None) -> SourceScan:
        result = SourceScan(name=name)
        carry = b""
        line_no = 1  # number of the line that starts the next block
        partial = False  # the last block ended inside one enormous line
        while True:
            data = stream.read(CHUNK)
            if not data:
                break
            if progress is not None:
                progress(len(data))
            result.bytes += len(data)
            buf = carry + data if carry else data
            cut = buf.rfind(b"\n")
            if cut < 0:
                if len(buf) > MAX_LINE:
                    self._block(buf, line_no, result)  # a piece of one enormous line
                    result.cut_lines += 0 if partial else 1
                    partial, carry = True, b""
                else:
                    carry = buf
                continue
            block, carry = buf[: cut + 1], buf[cut + 1 :]
            line_no += self._block(block, line_no, result)
            partial = False
        if carry:
            self._block(carry, line_no, result)
        result.lines = line_no if (carry or partial) else line_no - 1
        return result

    # -- one block of whole lines ------------------------------------------------------------
    def _block(self, block: bytes, first_line: int, result: SourceScan) -> int:
        """Scan whole lines starting at first_line; returns how many newlines the block holds."""
        if b"\x00" in block:
            result.binary = True
        if b"\x1b" in block:  # colour codes would split the words the patterns look for
            block = _ANSI_BYTES.sub(b"", block)
        candidates = self._candidates(block)
        if candidates:
            self._verify(block, first_line, candidates, result)
        newlines = block.count(b"\n")
        self._tail(block, first_line, newlines, result)
        return newlines

    def _candidates(self, block: bytes) -> dict[int, tuple[set[int], int]]:
        """Line start offset -> (indexes of patterns that may match that line, offset of one match)."""
        found: dict[int, tuple[set[int], int]] = {}

        def add(start: int, indexes, at: int) -> None:
            entry = found.get(start)
            if entry is None:
                found[start] = (set(indexes), at)
            else:
                entry[0].update(indexes)

        if self.db is not None:
            ends: list[tuple[int, int]] = []

            def on_match(index, _start, end, _flags, _ctx):
                ends.append((end, index))

            self.db.scan(block, match_event_handler=on_match)
            for end, index in ends:
                start = block.rfind(b"\n", 0, max(end - 1, 0)) + 1 if end else 0
                add(start, (index,), end)
            return found
        for table, haystack in ((self._exact, block), (self._folded, block.lower() if self._folded else b"")):
            for literal, indexes in table:
                needle = literal.encode("utf-8")
                pos = haystack.find(needle)
                while pos >= 0:
                    start = haystack.rfind(b"\n", 0, pos) + 1
                    add(start, indexes, pos + len(needle))
                    nl = haystack.find(b"\n", pos)
                    if nl < 0:
                        break
                    pos = haystack.find(needle, nl + 1)
        if self._bare:  # patterns without a literal (none in the shipped catalogue): every line
            start = 0
            while start < len(block):
                add(start, self._bare, start)
                nl = block.find(b"\n", start)
                start = len(block) if nl < 0 else nl + 1
        return found

    def _verify(self, block: bytes, first_line: int, candidates: dict[int, tuple[set[int], int]],
                result: SourceScan) -> None:
        from gpudoctor.engine.lines import parse_prefix

        regex, patterns = self.patterns.regex, self.patterns.patterns
        line_no, counted_to = first_line, 0
        windows_open: list[tuple[str, int, list[str], int]] = []
        for start in sorted(candidates):
            line_no += block.count(b"\n", counted_to, start)
            counted_to = start
            end = block.find(b"\n", start)
            end = len(block) if end < 0 else end
            indexes, at = candidates[start]
            if end - start > MAX_TEXT * 2:  # a giant line: keep the stretch around the match
                lo = max(start, at - MAX_TEXT)
                raw = block[lo : min(end, at + MAX_TEXT)]
            else:
                raw = block[start:end]
            text = _decode(raw).rstrip("\r")
            body = parse_prefix(text).body
            matched = [i for i in indexes if regex(i).search(body) or regex(i).search(text)]
            if not matched:
                continue
            hit = Hit(line_no, text[:MAX_TEXT])
            for i in matched:
                result.hits.setdefault(i, PatternHits()).add(hit)
                name = patterns[i].name
                if patterns[i].owner == "@" and name in _WINDOW_OPENERS and len(result.windows) < MAX_WINDOWS:
                    result.windows.append((name, line_no, self._window(block, start)))

    @staticmethod
    def _window(block: bytes, start: int) -> list[str]:
        lines, pos = [], start
        for _ in range(WINDOW_LINES):
            if pos >= len(block):
                break
            nl = block.find(b"\n", pos)
            nl = len(block) if nl < 0 else nl
            lines.append(_decode(block[pos : min(nl, pos + MAX_TEXT)]).rstrip("\r"))
            pos = nl + 1
        return lines

    @staticmethod
    def _tail(block: bytes, first_line: int, newlines: int, result: SourceScan) -> None:
        found: list[tuple[int, bytes]] = []
        pos = len(block) - 1 if block.endswith(b"\n") else len(block)
        for _ in range(64):  # blank lines are skipped, but only so many
            start = block.rfind(b"\n", 0, pos) + 1
            raw = block[start:pos]
            if raw.strip():
                found.append((start, raw[:MAX_TEXT]))
                if len(found) == TAIL_LINES:
                    break
            if start == 0:
                break
            pos = start - 1
        if not found:
            return
        lines = [(first_line + newlines - block.count(b"\n", start), _decode(raw).rstrip("\r")) for start, raw in found]
        result.tail = (result.tail + lines[::-1])[-TAIL_LINES:]
