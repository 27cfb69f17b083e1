"""Turn what the user named (files, directories, globs, '-' for stdin) into readable sources, decompressed by magic bytes."""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from gpudoctor.engine.lazyregex import LazyRegex
from gpudoctor.kb.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing typing costs every run start-up time
    from typing import BinaryIO

__all__ = ["InputError", "Source", "resolve", "open_source", "codec_of", "archive_kind", "inner_head",
           "rank_hints", "stdin_is_terminal", "GZIP_MAGIC", "ZIP_MAGIC"]

GZIP_MAGIC = b"\x1f\x8b"
# how each compressed format starts; the name a user gave the file does not matter
MAGIC = (
    (GZIP_MAGIC, "gzip"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"BZh", "bzip2"),
    (b"\xff\xfe", "utf-16"),  # a UTF-16 log (Windows PowerShell's redirection), by its byte-order mark
    (b"\xfe\xff", "utf-16"),
)
SNIFF_BYTES = 4096
_GLOB_CHARS = LazyRegex(r"[*?\[]")
# rank0.log, rank_3.txt, nccl_rank_12.log, worker-rank7.out, log.r3
_RANK_IN_NAME = LazyRegex(r"(?:^|[^a-z])(?:rank|r)[_-]?(\d{1,5})(?:[^0-9]|$)", re.IGNORECASE)
# torchrun --log-dir: <dir>/<run_id>/attempt_<n>/<local_rank>/{stdout,stderr,error}.{log,json}
_TORCHRUN_LAYOUT = LazyRegex(r"attempt_(\d+)[/\\](\d+)[/\\](?:stdout|stderr|error)\.(?:log|json)$")


class InputError(Exception):
    """A named input that cannot be read; the message says which and why."""


@record(frozen=True)
class Source:
    name: str  # as shown in evidence: the path as given, or "<stdin>"
    path: Path | None  # None for standard input
    size: int | None  # bytes on disk (compressed size when compressed), None when unknown
    compressed: bool = False
    rank_hint: int | None = None  # a rank read off the file name
    local_rank_hint: int | None = None
    attempt: int | None = None  # torchrun restart attempt, from its log-dir layout
    flight: bool = False  # a flight-recorder dump rather than a text log
    codec: str | None = None  # gzip | xz | zstd | bzip2 | utf-16, read from the first bytes


ZIP_MAGIC = b"PK\x03\x04"  # a zip member's local header; an empty zip starts with its index, PK\x05\x06


def archive_kind(raw_head: bytes, head: bytes) -> str | None:
    """"tar" or "zip" when a file's first bytes (raw, and decompressed when it is compressed) say so."""
    if raw_head.startswith((ZIP_MAGIC, b"PK\x05\x06")):
        return "zip"
    if head[257:262] == b"ustar":  # where POSIX and GNU tar put their magic in every member header
        return "tar"
    return None


def codec_of(head: bytes) -> str | None:
    """The compression format whose magic bytes start `head`, or None for plain data."""
    for magic, name in MAGIC:
        if head.startswith(magic):
            return name
    return None


def rank_hints(name: str) -> tuple[int | None, int | None, int | None]:
    """(rank, local rank, attempt) suggested by a file's path."""
    m = _TORCHRUN_LAYOUT.search(name)
    if m:
        return None, int(m.group(2)), int(m.group(1))
    m = _RANK_IN_NAME.search(Path(name).name)
    return (int(m.group(1)) if m else None), None, None


def _natural(path: Path) -> list:
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", str(path))]


def _why(path: str, exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"{path}: no such file or directory"
    return f"{path}: cannot read: {exc.strerror or exc}"


def _file_sources(path: Path, shown: str, problems: list[str], depth: int = 0) -> list[Source]:
    """The file as one source, or, for a tar or zip archive, each file inside it (an archive in an archive too)."""
    try:
        st = path.stat()
        with open(path, "rb") as fh:
            raw_head = head = fh.read(SNIFF_BYTES)
    except OSError as exc:
        raise InputError(_why(shown, exc)) from None
    codec = codec_of(head)
    if codec is not None:  # what it holds: a tar, a flight-recorder dump (often gzipped), or a log
        try:
            head = inner_head(open(path, "rb", buffering=0), codec, shown)
        except OSError:
            head = b""
    kind = archive_kind(raw_head, head)
    if kind is not None and depth >= 2:  # its bytes are no log: scanned raw they could only mislead
        problems.append(f"{shown}: a {kind} archive {depth + 1} levels deep, not expanded "
                        "(unpack it and pass its files)")
        return []
    if kind is None:
        return [_file_source(path, shown, st, codec, head)]
    from gpudoctor.engine.archives import expand

    try:
        raw = open(path, "rb", buffering=0)
    except OSError as exc:
        raise InputError(_why(shown, exc)) from None
    stream = _Tolerant(_decompressor(raw, codec, shown), shown, codec) if codec else raw
    before = len(problems)
    members = expand(path, shown, kind, stream, problems)
    if not members and len(problems) == before:
        problems.append(f"{shown}: the {kind} archive holds no files")
    out = []
    for name, copy in sorted(members, key=lambda m: _natural(Path(m[0]))):
        try:
            out += _file_sources(copy, name, problems, depth + 1)
        except InputError as exc:  # one member that cannot be read: named, and the others are read
            problems.append(str(exc))
    return out


def inner_head(raw, codec: str, name: str) -> bytes:
    """The first decompressed bytes of a compressed stream, which is closed after; b"" when it is damaged from the
    start or zstandard is missing (read as a log, the scan then says how far it got)."""
    try:
        with _Tolerant(_decompressor(raw, codec, name), name, codec) as fh:
            return fh.read(SNIFF_BYTES)
    except (OSError, InputError):
        return b""


def _file_source(path: Path, shown: str, st, codec: str | None, head: bytes) -> Source:
    from gpudoctor.engine.flight_sniff import looks_like_dump

    rank, local_rank, attempt = rank_hints(shown)
    return Source(
        name=shown, path=path, size=st.st_size, compressed=codec is not None, rank_hint=rank,
        local_rank_hint=local_rank, attempt=attempt, flight=looks_like_dump(head) if head else False, codec=codec,
    )


# what a run folder holds beside its logs (Hydra outputs/, wandb files/ with code/, a job's working directory):
# sources, whose comments quote errors, and checkpoints and arrays, whose bytes are no text. A folder walk leaves
# them out; a file named on the command line is still read.
NOT_LOGS = frozenset({".py", ".pyc", ".pyi", ".ipynb", ".pt", ".pth", ".ckpt", ".safetensors", ".npy", ".npz",
                      ".h5", ".hdf5", ".onnx", ".so", ".png", ".jpg", ".jpeg", ".gif", ".parquet", ".arrow"})


def _walk(root: Path, given: str, problems: list[str]) -> list[Path]:
    found: list[Path] = []
    passed: list[str] = []

    def complain(exc: OSError) -> None:
        problems.append(_why(exc.filename or given, exc))

    for folder, dirs, files in os.walk(root, onerror=complain):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.startswith("."):
                continue
            path = Path(folder) / name
            if Path(name).suffix.lower() in NOT_LOGS:
                passed.append(name)
                continue
            try:
                mode = path.stat().st_mode
            except OSError:
                mode = 0  # a dangling link or a file that went away: reading it names the problem
            if mode and not stat.S_ISREG(mode):  # a named pipe would block the walk until something wrote to it
                problems.append(f"{path}: skipped, not a regular file (a named pipe, socket or device)")
                continue
            found.append(path)
    if passed and found:
        shown = ", ".join(sorted(passed, key=lambda n: _natural(Path(n)))[:3]) + (", ..." if len(passed) > 3 else "")
        many = len(passed) > 1
        problems.append(f"{given}: left out {len(passed)} file{'s' if many else ''} that hold{'' if many else 's'} code, "
                        f"checkpoints or images, not logs ({shown}); name one to read it")
    elif passed:
        found = [Path(folder) / name for folder, _, files in os.walk(root) for name in files
                 if Path(name).suffix.lower() in NOT_LOGS and not name.startswith(".")]
    return sorted(found, key=_natural)


def _one(given: str, problems: list[str], shown: str | None = None) -> list[Source]:
    if given == "-":
        return [Source(name="<stdin>", path=None, size=None)]
    path = Path(given)
    if shown is not None:  # a copy of standard input on disk (an archive piped in): named as stdin
        return _file_sources(path, shown, problems)
    try:
        st = path.stat()
    except FileNotFoundError:
        if _GLOB_CHARS.search(given):  # a pattern the shell did not expand (quoted, or Windows)
            import glob

            matches = sorted(glob.glob(given, recursive=True), key=lambda p: _natural(Path(p)))
            if not matches:
                raise InputError(f"{given}: no file matches this pattern") from None
            return _matched(matches, problems)
        raise InputError(f"{given}: no such file or directory") from None
    except OSError as exc:
        raise InputError(_why(given, exc)) from None
    if stat.S_ISDIR(st.st_mode):
        files = _walk(path, given, problems)
        if not files:
            raise InputError(f"{given}: the directory holds no readable files")
        out = []
        for p in files:
            try:
                out += _file_sources(p, str(p), problems)
            except InputError as exc:  # vanished or unreadable: named, and the rest are read
                problems.append(str(exc))
        return out
    if stat.S_ISREG(st.st_mode):
        return _file_sources(path, given, problems)
    if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode):  # <(zcat x), /dev/stdin
        return [Source(name=given, path=path, size=None)]
    raise InputError(f"{given}: not a regular file or directory")


def _matched(matches: list[str], problems: list[str]) -> list[Source]:
    """The files a pattern matched, read as a directory's are: a folder is walked, anything but a regular file (a named
    pipe would block) is named and skipped, and one that cannot be read is named while the others are read."""
    out: list[Source] = []
    for m in matches:
        try:
            mode = os.stat(m).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                problems.append(f"{m}: skipped, not a regular file (a named pipe, socket or device)")
                continue
            out += _one(m, problems)
        except OSError as exc:  # went away after the pattern matched it
            problems.append(_why(m, exc))
        except InputError as exc:
            problems.append(str(exc))
    return out


def resolve(inputs: list[str], problems: list[str] | None = None, names: dict | None = None) -> list[Source]:
    """Sources for the given paths, globs and directories; '-' is stdin. Directories are walked in
    natural order; a tar or zip archive gives one source per file inside. With a `problems` list, an input that
    cannot be read is named there and the rest are kept; without one, the first such input raises InputError.
    `names` shows a path by another name (a piped-in archive copied to disk is "<stdin>")."""
    sources: list[Source] = []
    for given in inputs:
        found: list[str] = []
        try:
            sources.extend(_one(given, found, (names or {}).get(given)))
        except InputError as exc:
            found.append(str(exc))
        if found:
            if problems is None:
                raise InputError(found[0])
            problems.extend(found)
    return [_shown_safely(s) for s in _once(sources)]


def resolve_some(inputs: list[str], names: dict | None = None) -> tuple[list[Source], list[str]]:
    """(the sources that can be read, what was left out and why): a file left out beside readable ones (a train.py
    in a run folder, one unreadable log of eight) is a note, as diagnose prints it; InputError only when nothing
    can be read (the one problem, or how many inputs failed)."""
    problems: list[str] = []
    sources = resolve(inputs, problems, names)
    if not sources:
        raise InputError(problems[0] if len(problems) == 1 else f"none of the {len(problems)} inputs could be read")
    return sources, problems


def _once(sources: list[Source]) -> list[Source]:
    """Each file once, however often it was named (a folder and a file in it, the same path twice, a link)."""
    seen: set[tuple[int, int]] = set()
    out = []
    for source in sources:
        key = None
        if source.path is not None and source.size is not None:  # a regular file (not stdin, a pipe or a member)
            try:
                st = os.stat(source.path)
                key = (st.st_dev, st.st_ino)
            except OSError:
                pass
        if key is not None and key in seen:
            continue
        if key is not None:
            seen.add(key)
        out.append(source)
    return out


def _shown_safely(source: Source) -> Source:
    """A name with control characters (a file or archive member named so) is shown with them escaped: the name is
    printed in every report, and only the path opens the file."""
    if source.name.isprintable():
        return source
    from gpudoctor.engine.display import clean_for_display
    from gpudoctor.kb.record import replace

    return replace(source, name=clean_for_display(source.name))


class _Prefixed:
    """A stream whose first bytes were already read to sniff its format."""

    def __init__(self, head: bytes, stream: BinaryIO):
        self._head, self._stream = head, stream

    def readinto(self, view) -> int:
        if self._head:
            n = min(len(view), len(self._head))
            view[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        readinto = getattr(self._stream, "readinto", None)
        if readinto is not None:
            return readinto(view) or 0
        data = self._stream.read(len(view))
        view[: len(data)] = data
        return len(data)

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            data, self._head = self._head + self._stream.read(), b""
            return data
        buf = bytearray(n)
        got = self.readinto(memoryview(buf))
        return bytes(buf[:got])

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._stream.close()


class _Tolerant:
    """Reads a decompressing stream until it ends or breaks; a break (a truncated or damaged
    archive, a read error) ends the stream where it happened and is kept in `problem`."""

    def __init__(self, stream, name: str, codec: str | None):
        self._stream, self.name, self.codec = stream, name, codec
        self.problem: str | None = None
        self.done = 0

    def readinto(self, view) -> int:
        if self.problem is not None:
            return 0
        try:
            # one underlying read at a time (readinto1/read1): a buffered read of the whole request
            # would drop what it had gathered when the archive breaks off half-way
            readinto = getattr(self._stream, "readinto1", None) or getattr(self._stream, "readinto", None)
            read1 = getattr(self._stream, "read1", None)
            if read1 is not None and not hasattr(self._stream, "readinto1"):
                data = read1(len(view))
                n = len(data)
                view[:n] = data
            elif readinto is not None:
                n = readinto(view) or 0
            else:
                data = self._stream.read(len(view))
                n = len(data)
                view[:n] = data
        except MemoryError:
            raise
        except Exception as exc:  # EOFError, OSError, zlib.error, lzma.LZMAError, zstd.ZstdError ...
            what = f"{self.codec} data" if self.codec else "the file"
            reason = " ".join(str(exc).split()) or type(exc).__name__
            self.problem = (f"{self.name}: {what} ends early or is damaged after {self.done:,} bytes "
                            f"({reason}); what was read before it is kept" if self.done else
                            f"{self.name}: {what} is damaged or cut off before its first byte ({reason}): "
                            f"nothing in it could be read")
            return 0
        self.done += n
        return n

    def read(self, n: int = -1) -> bytes:
        """Up to n bytes (one underlying read); with no size, everything to the end of the stream."""
        if n is not None and n >= 0:
            buf = bytearray(n)
            return bytes(buf[:self.readinto(memoryview(buf))])
        parts, buf = [], bytearray(1 << 20)
        while got := self.readinto(memoryview(buf)):
            parts.append(bytes(buf[:got]))
        return b"".join(parts)

    def close(self) -> None:
        try:
            self._stream.close()
        except Exception:
            pass

    def __enter__(self) -> "_Tolerant":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _decompressor(raw, codec: str, name: str):
    if codec == "gzip":
        import gzip

        return gzip.GzipFile(fileobj=raw, mode="rb")
    if codec == "xz":
        import lzma

        return lzma.LZMAFile(raw, "rb")
    if codec == "bzip2":
        import bz2

        return bz2.BZ2File(raw, "rb")
    if codec == "utf-16":
        from gpudoctor.engine.transcode import Utf16Reader

        return Utf16Reader(raw)
    try:
        import zstandard
    except ImportError:
        raise InputError(f"{name}: zstd-compressed; install the zstandard package (pip install zstandard) "
                         f"or decompress it first (zstd -d)") from None
    return _ZstdReader(raw, zstandard)


class _ZstdReader:
    """zstd frames, one after another; unlike zstandard's stream_reader it says when the data stops mid-frame."""

    def __init__(self, raw, zstandard):
        self._raw, self._z = raw, zstandard
        self._obj = zstandard.ZstdDecompressor().decompressobj()
        self._pending = b""
        self._started = False  # input fed into the current frame

    def read1(self, n: int) -> bytes:
        while not self._pending:
            chunk = self._raw.read(1 << 16)  # small pieces bound what one decompress call can return
            if not chunk:
                if self._started and not self._obj.eof:
                    raise EOFError("zstd data ends before the end of its frame")
                return b""
            while chunk:
                self._started = True
                self._pending += self._obj.decompress(chunk)
                chunk = b""
                if self._obj.eof:  # a frame ended: the rest of the chunk starts the next one
                    chunk, self._started = self._obj.unused_data, False
                    self._obj = self._z.ZstdDecompressor().decompressobj()
        out, self._pending = self._pending[:n], self._pending[n:]
        return out

    def close(self) -> None:
        self._raw.close()


def _sniffed(raw, name: str) -> _Tolerant:
    """A stream of unknown format (stdin, a pipe): read its first bytes, then decompress if they say so."""
    head = b""
    while len(head) < 6:
        more = raw.read(6 - len(head))
        if not more:
            break
        head += more
    stream = _Prefixed(head, raw)
    codec = codec_of(head)
    return _Tolerant(_decompressor(stream, codec, name) if codec else stream, name, codec)


def open_source(source: Source, stdin: BinaryIO | None = None) -> _Tolerant:
    """A binary stream of the source's (decompressed) bytes. Reading it never raises: a damaged
    or truncated archive, or a read error, ends the stream and leaves a message in `.problem`."""
    if source.path is None:
        if stdin is None:
            raise InputError("<stdin>: no standard input (it is closed)")
        return _sniffed(stdin, source.name)
    try:
        raw = open(source.path, "rb", buffering=0)
    except OSError as exc:
        raise InputError(_why(source.name, exc)) from None
    if source.size is None:  # a pipe or device: its format is only known once read
        return _sniffed(raw, source.name)
    if source.codec:
        return _Tolerant(_decompressor(raw, source.codec, source.name), source.name, source.codec)
    return _Tolerant(raw, source.name, None)


def stdin_is_terminal(stdin) -> bool:
    try:
        return os.isatty(stdin.fileno())
    except (AttributeError, OSError, ValueError):
        return False
