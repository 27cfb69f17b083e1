"""Archives of logs (tar, plain or compressed, and zip): every file inside becomes a log of its own.

A job's logs usually travel as `logs.tar.gz` or `logs.zip`: one file per rank, a launcher log, perhaps NCCL's
per-rank debug files. Read as one stream, the archive's headers would be text and the ranks one log; so each
member is copied out, as it is read, into a scratch folder removed when the process ends, and is then read
exactly like a file of a directory (its rank from its name, its own compression by magic bytes). Nothing is
extracted where the user can see it and no member name is used as a path: a member is written under a
numbered name, and shown as `archive/member`.

A truncated or damaged archive keeps every member read before the break, the one it broke in as far as it
got, and says so; an encrypted or unsupported zip member is named and skipped.
"""
from __future__ import annotations

import os
from pathlib import Path

from gpudoctor.engine.lazyregex import LazyRegex

__all__ = ["expand", "spool_stdin"]

_CHUNK = 1 << 20
_UNSAFE = LazyRegex(r"[^\w.-]+")
_scratch: list[str] = []  # scratch folders this process made, removed at exit


def spool_stdin(stdin, sniff: int = 4096):
    """(stdin as the scan should read it, None), or (None, a copy on disk) when standard input holds a tar or zip
    archive, which is then read as that file is. The bytes read to tell are handed back in front of the rest."""
    from gpudoctor.engine.sources import _Prefixed, archive_kind, codec_of, inner_head

    head = b""
    while len(head) < sniff and (more := stdin.read(sniff - len(head))):
        head += more
    inner, codec = head, codec_of(head)
    if codec is not None:
        import io

        inner = inner_head(io.BytesIO(head), codec, "<stdin>")
    if archive_kind(head, inner) is None:
        return _Prefixed(head, stdin), None
    path = _folder() / "stdin"  # (removed with the members copied out of it, when the run ends)
    with open(path, "wb") as out:
        out.write(head)
        _copy(stdin, out)
    return None, path


def _skipped(name: str) -> bool:
    """Folders' own entries, hidden files and macOS resource forks, as a directory walk skips them."""
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".", "..")]
    return not parts or any(p.startswith(".") or p == "__MACOSX" for p in parts)


def _folder() -> Path:
    import atexit
    import tempfile

    path = tempfile.mkdtemp(prefix="gpudoctor-archive-")
    if not _scratch:
        atexit.register(_remove_all)
    _scratch.append(path)
    return Path(path)


def _remove_all() -> None:
    import shutil

    while _scratch:
        shutil.rmtree(_scratch.pop(), ignore_errors=True)


# How far an archive may expand on the scratch disk: logs compress 10-50 times, a zip bomb a thousand. A member is cut
# where the archive's copies pass RATIO times its own size (never under MIN_CAP), or where the disk would keep
# under FREE_FLOOR free, and the members after it are skipped.
RATIO = 100
MIN_CAP = 256 << 20
FREE_FLOOR = 512 << 20


class TooBig(Exception):
    """An archive expanded past what its size makes plausible for logs, or the scratch disk ran low."""


class _Out:
    """Where members are written: numbered files in one scratch folder, listed with the names they are shown by."""

    def __init__(self, shown: str, size: int = 0):
        self.shown, self.folder, self.members = shown, _folder(), []
        self.cap, self.written, self._free_at = max(MIN_CAP, RATIO * size), 0, 0

    def open(self, name: str):
        clean = name.replace("\\", "/").strip("/")
        base = _UNSAFE.sub("_", clean.rsplit("/", 1)[-1])[-80:] or "member"
        path = self.folder / f"{len(self.members):06d}-{base}"
        fh = open(path, "wb")  # listed only once it exists: a full disk leaves no name without a file
        self.members.append((f"{self.shown}/{clean}", path))
        return _Counted(fh, self)

    def count(self, n: int) -> None:
        self.written += n
        if self.written > self.cap:
            raise TooBig(f"its files expand past {self.cap >> 20} MiB, {RATIO} times its own size")
        if self.written >= self._free_at:  # the disk is asked every 64 MiB
            import shutil

            self._free_at = self.written + (64 << 20)
            if shutil.disk_usage(self.folder).free < FREE_FLOOR:
                raise TooBig(f"the scratch disk ({self.folder.parent}) has under {FREE_FLOOR >> 20} MiB free")

    def drop_last(self) -> None:
        name, path = self.members.pop()
        try:
            os.unlink(path)
        except OSError:
            pass


class _Counted:
    """A member's scratch file that counts what is written to it against the archive's cap."""

    def __init__(self, fh, out: _Out):
        self.fh, self.out = fh, out

    def write(self, data: bytes) -> None:
        room = self.out.cap - self.out.written
        self.fh.write(data[:max(0, room)] if len(data) > room else data)
        self.out.count(len(data))

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.fh.close()


def _copy(src, dst) -> None:
    while chunk := src.read(_CHUNK):
        dst.write(chunk)


def _files(n: int) -> str:
    return f"the {n} file{'s' * (n != 1)}" if n else "no file"


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if "encrypted" in text and "password" in text:  # zipfile's "File <ZipInfo ...> is encrypted, password required"
        return "encrypted: a password-protected zip; unpack it yourself and pass the files"
    return text or type(exc).__name__


def expand(path: Path, shown: str, kind: str, stream, problems: list[str]) -> list[tuple[str, Path]]:
    """(shown name, scratch file) per member, in archive order. `stream` reads the archive's decompressed bytes
    (a tar) and is closed here; problems get one line for a break or a skipped member."""
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    out = _Out(shown, size)
    try:
        if kind == "zip":
            stream.close()
            _zip(path, out, problems)
        else:
            _tar(stream, out, problems)
    except TooBig as exc:
        stream.close()
        name = out.members[-1][0] if out.members else shown
        problems.append(f"{shown}: {exc}: {name} is cut there and the files after it are skipped (a zip bomb, or "
                        f"logs to unpack yourself); {_files(len(out.members))} kept")
    except OSError as exc:  # the scratch folder is full or unwritable: what was copied is still read
        problems.append(f"{shown}: could not copy its files out ({_reason(exc)}); "
                        f"{len(out.members)} read before it are kept")
    return out.members


class _Tail:
    """The archive's decompressed stream, keeping the last bytes it handed out: tarfile drops a read that the break
    cut short, and the member it broke in keeps them from here."""

    def __init__(self, stream, keep: int = 2 * _CHUNK):
        from collections import deque

        self.stream, self.keep, self.end = stream, keep, 0
        self.chunks: deque[bytes] = deque()  # the last reads, whole: at least `keep` bytes when that many were read
        self.held = 0

    def read(self, n: int = -1) -> bytes:
        data = self.stream.read(n)
        if data:
            self.end += len(data)
            self.chunks.append(data)
            self.held += len(data)
            while self.held - len(self.chunks[0]) >= self.keep:
                self.held -= len(self.chunks.popleft())
        return data

    def since(self, offset: int) -> bytes:
        """What was read from offset on (empty when that is no longer kept)."""
        start = offset - (self.end - self.held)
        return b"".join(self.chunks)[start:] if 0 <= start <= self.held else b""


def _tar(stream, out: _Out, problems: list[str]) -> None:
    import tarfile

    tail = _Tail(stream)
    current = None  # (member, bytes written) of the member being copied
    try:
        with tarfile.open(fileobj=tail, mode="r|") as tar:
            for member in tar:
                if not member.isfile() or _skipped(member.name):
                    continue
                src = tar.extractfile(member)
                with out.open(member.name) as dst:
                    current = [member, 0]
                    while chunk := src.read(_CHUNK):
                        dst.write(chunk)
                        current[1] += len(chunk)
                current = None
    except (tarfile.TarError, EOFError) as exc:
        if current is not None:  # the member it broke in: as far as the stream got
            member, written = current
            rest = tail.since(member.offset_data + written)[:member.size - written]
            with open(out.members[-1][1], "ab") as dst:
                dst.write(rest)
        cut = getattr(stream, "problem", None)  # the decompressor's own account of the break, when it broke
        if cut:
            cut = cut.split("; what was read", 1)[0]
        whole = len(out.members) - (current is not None)
        if current is None or whole:
            kept = f"{_files(whole)} read before the break {'are' if whole != 1 else 'is'} kept"
            kept += f", and {current[0].name} as far as it got" if current is not None else ""
        else:
            kept = f"{current[0].name} is kept as far as it got"
        problems.append(f"{cut or f'{out.shown}: the tar archive ends early or is damaged ({_reason(exc)})'}; {kept}")
    else:
        if getattr(stream, "problem", None):
            problems.append(stream.problem)
    finally:
        stream.close()


def _zip(path: Path, out: _Out, problems: list[str]) -> None:
    import zipfile

    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:  # no central directory: cut off, or damaged
        _zip_local(path, out, problems, _reason(exc))
        return
    with archive:
        for info in archive.infolist():
            if info.is_dir() or _skipped(info.filename):
                continue
            before = len(out.members)
            try:
                with archive.open(info) as src, out.open(info.filename) as dst:
                    _copy(src, dst)
            except (RuntimeError, NotImplementedError) as exc:  # encrypted, or a compression zipfile lacks
                if len(out.members) > before:
                    out.drop_last()
                problems.append(f"{out.shown}: {info.filename} skipped ({_reason(exc)})")
            except (OSError, TooBig):  # writing the copy failed, or the archive expands too far: expand() says so
                raise
            except Exception as exc:  # a damaged member: bad CRC, zlib.error, lzma.LZMAError ...
                problems.append(f"{out.shown}: {info.filename} is damaged ({_reason(exc)}); what was read is kept")


def _zip_local(path: Path, out: _Out, problems: list[str], why: str) -> None:
    """A zip without its index (the end was cut off): walk the members' own headers from the start, as far as
    they go. Stored and deflated members whose sizes their header gives are read; a streamed member (sizes
    only after its data) ends the walk."""
    import struct
    import zlib

    from gpudoctor.engine.sources import ZIP_MAGIC

    kept_before = len(out.members)
    stop = "its index is missing"
    with open(path, "rb") as fh:
        while True:
            header = fh.read(30)
            if len(header) < 30 or not header.startswith(ZIP_MAGIC):
                break
            _, _, flag, method, _, _, _, csize, _, nlen, xlen = struct.unpack("<4sHHHHHIIIHH", header)
            name = fh.read(nlen).decode("utf-8" if flag & 0x800 else "cp437", "replace")
            fh.read(xlen)
            if flag & 0x08 or method not in (0, 8) or flag & 0x01:
                stop = f"{name} cannot be read without the index"
                break
            data = fh.read(csize)
            if not (name.endswith("/") or _skipped(name)):
                with out.open(name) as dst:
                    if method == 8:
                        try:
                            dst.write(zlib.decompressobj(-15).decompress(data))
                        except zlib.error:
                            stop = f"{name} is damaged"
                            break
                    else:
                        dst.write(data)
            if len(data) < csize:
                stop = f"it breaks off inside {name}"
                break
    problems.append(f"{out.shown}: the zip archive ends early or is damaged ({why}; {stop}); "
                    f"{_files(len(out.members) - kept_before)} read before the break "
                    f"{'is' if len(out.members) - kept_before == 1 else 'are'} kept")
