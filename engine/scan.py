"""Stream a log of any size and bytes through the pattern set at constant memory, keeping matched lines."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import BinaryIO, Callable

from gpudoctor.engine.patterns import PatternSet

CHUNK = 16 << 20  # bytes read at a time, into one reused buffer
MAX_LINE = 1 << 20  # a longer line is scanned in pieces, so memory stays bounded
MAX_TEXT = 4096  # characters of a matched line kept as evidence (around the match)
KEEP_FIRST, KEEP_LAST = 8, 4
COMMON_LITERAL = 256  # past this many lines with a literal in one block, the Python path switches to re  # matched lines kept per pattern: the first few and the most recent
WINDOW_LINES = 60  # lines kept after a traceback header
MAX_WINDOWS = 64  # per source: enough for every rank of an interleaved log
TAIL_LINES = 6

_ANSI_BYTES = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)")
_WINDOW_OPENERS = {"traceback"}  # the rank reading parses the lines after a traceback header


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


def _decode(raw: bytes | bytearray) -> str:
    return raw.decode("utf-8", "replace")


class Scanner:
    def __init__(self, patterns: PatternSet, *, use_hyperscan: bool = True):
        self.patterns = patterns
        self.db = patterns.hyperscan() if use_hyperscan else None
        self.engine = "hyperscan" if self.db is not None else "python"
        self._exact, self._folded, self._bare, self._singles = patterns.literal_table()

    def scan(self, stream: BinaryIO, name: str, progress: Callable[[int], None] | None = None,
             size_hint: int | None = None) -> SourceScan:
        """Read the stream in chunks into one reused buffer; only whole lines reach the patterns."""
        result = SourceScan(name=name)
        # a small file gets a small buffer: zeroing 17 MB costs more than scanning 10 KB
        chunk = CHUNK if size_hint is None else max(1 << 16, min(CHUNK, size_hint + 1))
        # a file that fits in one read never carries a partial line into a second one
        buffer = bytearray(chunk + (1 if size_hint is not None and size_hint < chunk else MAX_LINE))
        view = memoryview(buffer)
        readinto = getattr(stream, "readinto", None)
        held = 0  # bytes of an unfinished last line kept at the front of the buffer
        line_no = 1  # number of the line that starts the next block
        partial = False  # the last block ended inside one enormous line
        while True:
            if readinto is not None:
                n = readinto(view[held : held + chunk])
            else:
                data = stream.read(chunk)
                n = len(data)
                buffer[held : held + n] = data
            if not n:
                break
            if progress is not None:
                progress(n)
            result.bytes += n
            filled = held + n
            cut = buffer.rfind(b"\n", held, filled)
            if cut < 0:
                if filled > MAX_LINE:
                    self._block(buffer, filled, line_no, result)  # a piece of one enormous line
                    result.cut_lines += 0 if partial else 1
                    partial, held = True, 0
                else:
                    held = filled
                continue
            end = cut + 1
            line_no += self._block(buffer, end, line_no, result)
            held = filled - end
            buffer[:held] = view[end:filled]
            partial = False
        if held:
            self._block(buffer, held, line_no, result)
        result.lines = line_no if (held or partial) else line_no - 1
        view.release()
        return result

    # -- one block of whole lines ------------------------------------------------------------
    def _block(self, data: bytearray | bytes, end: int, first_line: int, result: SourceScan) -> int:
        """Scan data[:end], whole lines from first_line; returns how many newlines it holds."""
        if not result.binary and data.find(b"\x00", 0, min(end, 1 << 16)) >= 0:
            result.binary = True
        if data.find(b"\x1b", 0, end) >= 0:  # colour codes would split the words the patterns look for
            data = _ANSI_BYTES.sub(b"", bytes(data[:end]))
            end = len(data)
        candidates = self._candidates(data, end)
        if candidates:
            line_no, counted_to = self._verify(data, end, first_line, candidates, result)
            newlines = line_no - first_line + data.count(b"\n", counted_to, end)
        else:
            newlines = data.count(b"\n", 0, end)
        self._tail(data, end, first_line, newlines, result)
        return newlines

    def _candidates(self, block: bytearray | bytes, end: int) -> dict[int, tuple[set[int], int]]:
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

            with memoryview(block) as view:
                self.db.scan(view[:end], match_event_handler=on_match)
            for at, index in ends:
                start = block.rfind(b"\n", 0, max(at - 1, 0)) + 1 if at else 0
                add(start, (index,), at)
            return found
        for table, haystack in ((self._exact, block), (self._folded, block[:end].lower() if self._folded else b"")):
            for literal, indexes in table:
                needle = literal.encode("utf-8")
                pos = haystack.find(needle, 0, end)
                seen = 0
                while pos >= 0:
                    start = haystack.rfind(b"\n", 0, pos) + 1
                    seen += 1
                    if seen > COMMON_LITERAL:
                        # a literal on every other line ("step", "loss"): let re find the real matches
                        # in the rest of the block rather than hand each line to Python
                        for index in indexes:
                            for m in self.patterns.bytes_regex(index).finditer(block, start, end):
                                at = m.end()
                                add(block.rfind(b"\n", 0, max(at - 1, 0)) + 1 if at else 0, (index,), at)
                        break
                    add(start, indexes, pos + len(needle))
                    nl = haystack.find(b"\n", pos, end)
                    if nl < 0:
                        break
                    pos = haystack.find(needle, nl + 1, end)
        lowered = None
        for p in self._singles:
            # like hyperscan's single-match mode: the first line of the block that really matches
            if p.caseless and lowered is None:
                lowered = block[:end].lower()
            haystack = lowered if p.caseless else block
            regex = self.patterns.regex(p.index)
            best = None
            for literal in p.literals:
                needle = literal.encode("utf-8")
                pos = haystack.find(needle, 0, end if best is None else best)
                while pos >= 0:
                    start = block.rfind(b"\n", 0, pos) + 1
                    nl = block.find(b"\n", pos, end)
                    nl = end if nl < 0 else nl
                    if regex.search(_decode(block[start:min(nl, start + MAX_TEXT * 2)])):
                        best = start if best is None else min(best, start)
                        break
                    pos = haystack.find(needle, nl + 1, end if best is None else best)
            if best is not None:
                add(best, (p.index,), best)
        if self._bare:  # patterns without a literal (none in the shipped catalogue): every line
            start = 0
            while start < end:
                add(start, self._bare, start)
                nl = block.find(b"\n", start, end)
                start = end if nl < 0 else nl + 1
        return found

    def _verify(self, block: bytearray | bytes, limit: int, first_line: int,
                candidates: dict[int, tuple[set[int], int]], result: SourceScan) -> tuple[int, int]:
        """Check candidate lines with Python re; returns (line number, offset) counted up to."""
        from gpudoctor.engine.prefix import parse_prefix

        regex, patterns = self.patterns.regex, self.patterns.patterns
        line_no, counted_to = first_line, 0
        windows_open: list[tuple[str, int, list[str], int]] = []
        for start in sorted(candidates):
            line_no += block.count(b"\n", counted_to, start)
            counted_to = start
            end = block.find(b"\n", start, limit)
            end = limit if end < 0 else end
            indexes, at = candidates[start]
            if end - start > MAX_TEXT * 2:  # a giant line: keep the stretch around the match
                lo = max(start, at - MAX_TEXT)
                raw = block[lo : min(end, at + MAX_TEXT)]
            else:
                raw = block[start:end]
            text = _decode(raw).rstrip("\r")
            matched = [i for i in indexes if regex(i).search(text)]
            if len(matched) < len(indexes):  # anchored patterns read the line without its prefixes
                body = parse_prefix(text).body
                matched += [i for i in indexes if i not in matched and regex(i).search(body)]
            if not matched:
                continue
            hit = Hit(line_no, text[:MAX_TEXT])
            for i in matched:
                result.hits.setdefault(i, PatternHits()).add(hit)
                name = patterns[i].name
                if patterns[i].owner == "@" and name in _WINDOW_OPENERS and len(result.windows) < MAX_WINDOWS:
                    result.windows.append((name, line_no, self._window(block, limit, start)))
        return line_no, counted_to

    @staticmethod
    def _window(block: bytearray | bytes, limit: int, start: int) -> list[str]:
        lines, pos = [], start
        for _ in range(WINDOW_LINES):
            if pos >= limit:
                break
            nl = block.find(b"\n", pos, limit)
            nl = limit if nl < 0 else nl
            lines.append(_decode(block[pos : min(nl, pos + MAX_TEXT)]).rstrip("\r"))
            pos = nl + 1
        return lines

    @staticmethod
    def _tail(block: bytearray | bytes, limit: int, first_line: int, newlines: int, result: SourceScan) -> None:
        found: list[tuple[int, bytes]] = []
        pos = limit - 1 if limit and block[limit - 1] == 10 else limit
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
        lines = [(first_line + newlines - block.count(b"\n", start, limit), _decode(raw).rstrip("\r"))
                 for start, raw in found]
        result.tail = (result.tail + lines[::-1])[-TAIL_LINES:]
