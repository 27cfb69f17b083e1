"""Stream a log of any size and bytes through the pattern set at constant memory, keeping matched lines."""
from __future__ import annotations

from gpudoctor.engine.display import strip_ansi_bytes
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.patterns import PatternSet
from gpudoctor.engine.rewrap import detect_width, rejoin

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing typing costs every run start-up time
    from typing import BinaryIO, Callable

CHUNK = 16 << 20  # bytes read at a time, into one reused buffer
MAX_LINE = 1 << 20  # a longer line is scanned in pieces, so memory stays bounded
TINY = 256 << 10  # under this, with no engine asked for, the Python engine is quicker to start than re2
HUGE_LINE = 1 << 19  # a line this long is flagged in every output format
MAX_TEXT = 4096  # characters of a matched line kept as evidence (around the match)
WIDTH_SAMPLE = 1 << 14  # bytes whose rows tell a hard-wrapped paste (64 KB read 4x the rows for the same answer on the
# dev set re-wrapped at 80 and 120 columns, and cost 7% of the CPU time of a directory of 1 MB per-rank logs)
KEEP_FIRST, KEEP_LAST = 8, 4  # matched lines kept per pattern: the first few and the most recent
WINDOW_LINES = 60  # lines kept after a traceback header
RICH_WINDOW_LINES = 600  # after rich's boxed header: each frame takes a dozen rows (context lines, locals)
_BOX_CORNER = "╭".encode()  # rich's box opens its traceback header
MAX_WINDOWS = 64  # per source: enough for every rank of an interleaved log
TAIL_LINES = 6
RANK_TAIL_BYTES = 256 << 10  # how far back from a block's end each rank's last line is looked for
RANK_TAIL_MAX = 64  # distinct rank prefixes kept per source
# a line that opens with a rank's prefix: torchrun's [rank3]: (2.2+) and --tee's [default3]:, Open MPI's [1,3]<stderr>:
# and SageMaker's [1,mpirank:3,algo-1]<stderr>:, and the [rank3] / [Rank 3] that scripts put before their own prints.
# Led by the newline, so that re's literal-prefix search skips from line to line (9x faster over 256 KB than ^ with
# re.MULTILINE, which tries every position); a block's first line is matched apart
_RANK_AT = (rb"\[(?:rank|Rank|RANK) ?\d{1,6}\]|\[\d{1,6},(?:mpirank:)?\d{1,6}(?:,[\w.-]{1,100})?\]<std(?:out|err)>|"
            rb"\[[A-Za-z_][\w-]{0,63}?\d{1,6}\]:")
# a collector's column may stand before it (kubectl --timestamps, containerd, compose, Ray, srun --label, pdsh): any
# run without "[" (possessive, so a line with no rank prefix costs one pass over its first 80 characters at most)
_RANK_LINE = _lazy(rb"\n[^\n\[]{0,80}+(" + _RANK_AT + rb")")
_RANK_FIRST = _lazy(rb"[^\n\[]{0,80}+(" + _RANK_AT + rb")")
KEEP_BUFFER = 4 << 20  # a scanner keeps a buffer this big or smaller for its next source

_WINDOW_OPENERS = {"traceback"}  # the rank reading parses the lines after a traceback header


# Plain classes rather than dataclasses: `diagnose` imports this module on every run, and each
# dataclass costs a few milliseconds of start-up to generate.
class Hit:
    """One line that a pattern matched, as decoded text (control characters intact: sanitise to print)."""

    __slots__ = ("line_no", "text")

    def __init__(self, line_no: int, text: str):
        self.line_no = line_no  # 1-based, in the source as given (decompressed)
        self.text = text

    def __eq__(self, other) -> bool:
        return isinstance(other, Hit) and (self.line_no, self.text) == (other.line_no, other.text)

    __hash__ = None  # mutable, like the dataclass it replaces

    def __repr__(self) -> str:
        return f"Hit(line_no={self.line_no!r}, text={self.text!r})"


class PatternHits:
    """How often one pattern matched, with the first few and the most recent lines."""

    __slots__ = ("count", "first", "last")

    def __init__(self, count: int = 0, first: list[Hit] | None = None, last: list[Hit] | None = None):
        self.count = count
        self.first = [] if first is None else first
        self.last = [] if last is None else last

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

    def __repr__(self) -> str:
        return f"PatternHits(count={self.count!r}, first={self.first!r}, last={self.last!r})"


class SourceScan:
    """What one source (file, stdin, decompressed archive) held, as far as the patterns are concerned."""

    __slots__ = ("name", "bytes", "lines", "hits", "windows", "tail", "cut_lines", "binary", "huge_lines", "problem",
                 "rank_tail")

    def __init__(self, name: str, bytes: int = 0, lines: int = 0, hits: dict[int, PatternHits] | None = None,  # noqa: A002
                 windows: list | None = None, tail: list | None = None, cut_lines: int = 0, binary: bool = False,
                 huge_lines: bool = False, problem: str | None = None):
        self.name = name
        self.bytes = bytes
        self.lines = lines
        self.hits: dict[int, PatternHits] = {} if hits is None else hits
        self.windows: list[tuple[str, int, list[str]]] = [] if windows is None else windows  # (opener, line_no, lines)
        self.tail: list[tuple[int, str]] = [] if tail is None else tail  # the last non-empty lines
        self.cut_lines = cut_lines  # lines longer than MAX_LINE, scanned in pieces
        self.binary = binary  # NUL bytes seen
        self.huge_lines = huge_lines  # a line of HUGE_LINE bytes or more (evidence from it: the text around the match)
        self.problem = problem  # the stream ended early (a truncated archive, a read error): what was read is kept
        # rank prefix -> (line number, text) of the last line near the end that opens with it: in one merged log of
        # several ranks, what each rank said last, errors or not (the rank reading tells a silent rank by it)
        self.rank_tail: dict[bytes, tuple[int, str]] = {}

    def __repr__(self) -> str:
        return f"SourceScan(name={self.name!r}, bytes={self.bytes!r}, lines={self.lines!r}, hits={len(self.hits)})"


_MEMCHR_FROM = 1 << 17  # a stretch shorter than this is counted the plain way
_MEMCHR_PIECE = 1 << 16  # under malloc's mmap threshold: the copies stay in the heap and in cache
_SHORT_LINES = 48  # bytes: below this average, bytes.count wins


def count_newlines(data: bytes | bytearray, start: int, end: int) -> int:
    """How many newlines data[start:end] holds. bytes.count tests every byte in turn; bytes.replace finds each
    newline with memchr, which skips a whole line at once: measured 1.3x faster on 100-byte lines, 1.8x on 80-byte
    step lines and more on longer ones, but slower below ~40 bytes, so the first 4 KB decide. Counting is about a
    third of the CPU time of scanning a directory of 1 MB per-rank logs (hyperscan itself is about half)."""
    if end - start < _MEMCHR_FROM:
        return data.count(b"\n", start, end)
    head_end = min(end, start + 4096)
    total = data.count(b"\n", start, head_end)
    if total * _SHORT_LINES > 4096:
        return total + data.count(b"\n", head_end, end)
    with memoryview(data) as view:
        for lo in range(head_end, end, _MEMCHR_PIECE):
            piece = view[lo : min(end, lo + _MEMCHR_PIECE)].tobytes()  # pieces keep the copies small
            total += len(piece) - len(piece.replace(b"\n", b""))
    return total


def _decode(raw: bytes | bytearray) -> str:
    return raw.decode("utf-8", "replace")


def _centred(text: str, m, cut_left: bool, cut_right: bool) -> str:
    """At most MAX_TEXT characters of a giant line, centred on the match, marked where they were cut."""
    half = MAX_TEXT // 2 - 2
    mid = (m.start() + m.end()) // 2 if m is not None else len(text) // 2
    lo = max(0, mid - half)
    hi = min(len(text), lo + 2 * half)
    lo = max(0, hi - 2 * half)
    return ("…" if cut_left or lo else "") + text[lo:hi] + ("…" if cut_right or hi < len(text) else "")


SNIFF = 1 << 16  # a stream of unknown size is read this far first: under it, its size is known


def _sniff(stream) -> tuple:
    """(a stream giving the same bytes, their size if the stream ended within SNIFF bytes, else None)."""
    parts, got = [], 0
    while got < SNIFF:
        data = stream.read(SNIFF - got)
        if not data:  # the end (a short read alone is not: a pipe hands over what it has)
            import io

            head = b"".join(parts)
            return io.BytesIO(head), len(head)
        parts.append(data)
        got += len(data)
    return _Prefixed(b"".join(parts), stream), None


class _Prefixed:
    """The bytes already read from a stream, then the rest of it."""

    def __init__(self, head: bytes, rest) -> None:
        self._head, self._at, self._rest = head, 0, rest

    def readinto(self, view) -> int:
        if self._at < len(self._head):
            n = min(len(view), len(self._head) - self._at)
            view[:n] = self._head[self._at : self._at + n]
            self._at += n
            return n
        readinto = getattr(self._rest, "readinto", None)
        if readinto is not None:
            return readinto(view)
        data = self._rest.read(len(view))
        view[: len(data)] = data
        return len(data)


class Scanner:
    """Reads streams block by block; an engine (hyperscan, re2, python) proposes lines, Python re verifies them."""

    def __init__(self, patterns: PatternSet, *, use_hyperscan: bool = True, engine: str | None = None,
                 big_from: int | None = None):
        self.patterns = patterns
        # small inputs: loading hyperscan's database costs more than it saves; re2 builds in milliseconds,
        # and for a file under TINY bytes the Python engine needs no compiled set at all. big_from: inputs of
        # unknown size (a pipe) pick their engine once their size is known, the fastest one from big_from bytes
        self._big_from = big_from if engine is None and use_hyperscan else None
        self._small = engine is None and (not use_hyperscan or self._big_from is not None)
        self._matchers: dict[str, object] = {}
        self.matcher = None if self._small else self._matcher(engine)
        self.engine = self.matcher.name if self.matcher is not None else "python"
        self._width: int | None = None
        self._rank_tails = True
        self._spare: bytearray | None = None  # the last source's buffer, for the next one

    def _matcher(self, engine: str | None):
        from gpudoctor.engine.engines import make_matcher

        if engine not in self._matchers:
            self._matchers[engine] = make_matcher(self.patterns, engine)
        return self._matchers[engine]

    def scan(self, stream: BinaryIO, name: str, progress: Callable[[int], None] | None = None,
             size_hint: int | None = None, rank_tail: bool = True) -> SourceScan:
        """Read the stream in chunks into one reused buffer; only whole lines reach the patterns."""
        result = SourceScan(name=name)
        original = stream
        if size_hint is None:  # a pipe: most are a pasted error, which needs no 17 MB buffer
            stream, size_hint = _sniff(stream)
        if self._small:
            if size_hint is not None and size_hint < TINY:
                name = "python"
            elif self._big_from is not None and (size_hint is None or size_hint >= self._big_from):
                name = None  # the fastest installed: hyperscan where it is
            else:
                name = "re2"
            self.matcher = self._matcher(name)
            self.engine = self.matcher.name
        # a small file gets a small buffer: zeroing 17 MB costs more than scanning 10 KB
        chunk = CHUNK if size_hint is None else max(1 << 16, min(CHUNK, size_hint + 1))
        # a file that fits in one read never carries a partial line into a second one
        size = chunk + (1 if size_hint is not None and size_hint < chunk else MAX_LINE)
        # a fresh buffer costs the kernel a page fault per 4 KB to zero it, about as much as reading a 1 MB file into
        # it: consecutive sources (a directory of per-rank logs) share one. Nothing reads past the bytes filled.
        buffer = self._spare if self._spare is not None and len(self._spare) >= size else bytearray(size)
        self._spare = None  # not shared while in use (a scan that raises leaves nothing half-read behind)
        view = memoryview(buffer)
        readinto = getattr(stream, "readinto", None)
        held = 0  # bytes of an unfinished last line kept at the front of the buffer
        line_no = 1  # number of the line that starts the next block
        partial = False  # the last block ended inside one enormous line
        self._width = None  # a hard-wrapped paste's width, read off the first block
        # each rank's last line near the end: wanted where the lines' prefixes tell the ranks apart (a merged log),
        # not for a per-rank file whose name gives its rank (a tenth of the scan of a 1 MB file)
        self._rank_tails = rank_tail
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
            if line_no == 1:
                self._width = detect_width(bytes(buffer[: min(end, WIDTH_SAMPLE)]))
            line_no += self._block(buffer, end, line_no, result)
            held = filled - end
            buffer[:held] = view[end:filled]
            partial = False
        if held:
            if line_no == 1:
                self._width = detect_width(bytes(buffer[: min(held, WIDTH_SAMPLE)]))
            self._block(buffer, held, line_no, result)
        result.lines = line_no if (held or partial) else line_no - 1
        result.problem = getattr(original, "problem", None)
        view.release()
        if len(buffer) <= KEEP_BUFFER:
            self._spare = buffer
        return result

    # -- one block of whole lines ------------------------------------------------------------
    def _block(self, data: bytearray | bytes, end: int, first_line: int, result: SourceScan) -> int:
        """Scan data[:end], whole lines from first_line; returns how many newlines it holds."""
        if not result.binary and data.find(b"\x00", 0, min(end, 1 << 16)) >= 0:
            result.binary = True
        if not result.huge_lines:
            # every line of HUGE_LINE * 2 bytes or more spans one of these windows whole: a few finds per block
            result.huge_lines = any(data.find(b"\n", k, k + HUGE_LINE) < 0 for k in range(0, end - HUGE_LINE + 1, HUGE_LINE))
        if data.find(b"\x1b", 0, end) >= 0:  # colour codes would split the words the patterns look for
            data = strip_ansi_bytes(bytes(data[:end]))
            end = len(data)
        if self._width:  # a wrapped paste: rows rejoined, line numbers kept
            data = rejoin(bytes(data[:end]), self._width)
            end = len(data)
        candidates = self.matcher.candidates(data, end)
        if candidates:
            line_no, counted_to = self._verify(data, end, first_line, candidates, result)
            newlines = line_no - first_line + count_newlines(data, counted_to, end)
        else:
            newlines = count_newlines(data, 0, end)
        self._tail(data, end, first_line, newlines, result)
        if self._rank_tails:
            self._rank_tail(data, end, first_line, newlines, result)
        return newlines

    def _verify(self, block: bytearray | bytes, limit: int, first_line: int,
                candidates: dict[int, tuple[set[int], int]], result: SourceScan) -> tuple[int, int]:
        """Check candidate lines with Python re; returns (line number, offset) counted up to."""
        from gpudoctor.engine.prefix import parse_prefix

        regex, patterns = self.patterns.regex, self.patterns.patterns
        line_no, counted_to = first_line, 0
        for start in sorted(candidates):
            line_no += count_newlines(block, counted_to, start)
            counted_to = start
            end = block.find(b"\n", start, limit)
            end = limit if end < 0 else end
            indexes, at = candidates[start]
            giant = end - start > MAX_TEXT * 2
            if giant:  # a giant line: read the stretch around the match
                lo = max(start, at - MAX_TEXT)
                raw = block[lo : min(end, at + MAX_TEXT)]
            else:
                lo, raw = start, block[start:end]
            text = _decode(raw).rstrip("\r")
            found = {i: regex(i).search(text) for i in indexes}
            matched = [i for i, m in found.items() if m]
            anchored = [i for i in indexes if i not in matched and i in self.patterns.anchored]
            if anchored:  # anchored patterns read the line without its prefixes
                body = parse_prefix(text).body
                matched += [i for i in anchored if regex(i).search(body)]
            if not matched:
                continue
            if giant or len(text) > MAX_TEXT:
                text = _centred(text, found.get(matched[0]), lo > start, lo + len(raw) < end)
            hit = Hit(line_no, text)
            for i in matched:
                result.hits.setdefault(i, PatternHits()).add(hit)
                name = patterns[i].name
                if patterns[i].owner == "@" and name in _WINDOW_OPENERS and len(result.windows) < MAX_WINDOWS:
                    result.windows.append((name, line_no, self._window(block, limit, start)))
        return line_no, counted_to

    @staticmethod
    def _window(block: bytearray | bytes, limit: int, start: int) -> list[str]:
        lines, pos = [], start
        first_nl = block.find(b"\n", start, limit)
        boxed = block.find(_BOX_CORNER, start, limit if first_nl < 0 else first_nl) >= 0
        for _ in range(RICH_WINDOW_LINES if boxed else WINDOW_LINES):
            if pos >= limit:
                break
            nl = block.find(b"\n", pos, limit)
            nl = limit if nl < 0 else nl
            lines.append(_decode(block[pos : min(nl, pos + MAX_TEXT)]).rstrip("\r"))
            pos = nl + 1
        return lines

    @staticmethod
    def _rank_tail(block: bytearray | bytes, limit: int, first_line: int, newlines: int, result: SourceScan) -> None:
        """The last line of each rank prefix in the final RANK_TAIL_BYTES of the block (later blocks replace it)."""
        lo = max(0, limit - RANK_TAIL_BYTES)
        if lo:
            lo = block.find(b"\n", lo, limit) + 1
            if lo <= 0:
                return
        last: dict[bytes, int] = {}
        first = _RANK_FIRST.match(block, lo, limit)
        if first is not None:
            last[first.group(1)] = first.start(1)
        for m in _RANK_LINE.finditer(block, lo, limit):
            last[m.group(1)] = m.start(1)
            if len(last) > RANK_TAIL_MAX:
                return  # not rank prefixes after all (a table, a dump)
        if not last:
            return
        tail = result.rank_tail
        line_no, counted = first_line + newlines - block.count(b"\n", lo, limit), lo  # the line number at lo
        for key, start in sorted(last.items(), key=lambda kv: kv[1]):  # in the order of the lines
            line_no += block.count(b"\n", counted, start)
            counted = start
            end = block.find(b"\n", start, limit)
            end = limit if end < 0 else end
            tail.pop(key, None)
            tail[key] = (line_no, _decode(block[start : min(end, start + MAX_TEXT)]).rstrip("\r"))
        while len(tail) > RANK_TAIL_MAX:
            tail.pop(next(iter(tail)))

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
