"""Turn what the user named (files, directories, .gz, '-' for stdin) into readable sources, with rank hints."""
from __future__ import annotations

import gzip
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

GZIP_MAGIC = b"\x1f\x8b"
# rank0.log, rank_3.txt, nccl_rank_12.log, worker-rank7.out, log.r3
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|r)[_-]?(\d{1,5})(?:[^0-9]|$)", re.IGNORECASE)
# torchrun --log-dir: <dir>/<run_id>/attempt_<n>/<local_rank>/{stdout,stderr,error}.{log,json}
_TORCHRUN_LAYOUT = re.compile(r"attempt_(\d+)[/\\](\d+)[/\\](?:stdout|stderr|error)\.(?:log|json)$")


class InputError(Exception):
    """A named input that cannot be read; the message says which and why."""


@dataclass(frozen=True)
class Source:
    name: str  # as shown in evidence: the path as given, or "<stdin>"
    path: Path | None  # None for standard input
    size: int | None  # bytes on disk (compressed size for .gz), None when unknown
    compressed: bool = False
    rank_hint: int | None = None  # a rank read off the file name
    local_rank_hint: int | None = None
    attempt: int | None = None  # torchrun restart attempt, from its log-dir layout
    flight: bool = False  # a flight-recorder dump rather than a text log


def rank_hints(name: str) -> tuple[int | None, int | None, int | None]:
    """(rank, local rank, attempt) suggested by a file's path."""
    m = _TORCHRUN_LAYOUT.search(name)
    if m:
        return None, int(m.group(2)), int(m.group(1))
    m = _RANK_IN_NAME.search(Path(name).name)
    return (int(m.group(1)) if m else None), None, None


def _natural(path: Path) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def _sniff(path: Path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(4096)


def _describe_os_error(path: str, exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    return f"{path}: cannot read: {reason}"


def _file_source(path: Path, shown: str) -> Source:
    try:
        st = path.stat()
        head = _sniff(path)
    except OSError as exc:
        raise InputError(_describe_os_error(shown, exc)) from None
    compressed = head.startswith(GZIP_MAGIC)
    if compressed:
        try:
            with gzip.open(path, "rb") as fh:
                head = fh.read(4096)
        except (OSError, EOFError) as exc:
            raise InputError(f"{shown}: not a readable gzip file ({exc})") from None
    from gpudoctor.engine.flight_sniff import looks_like_dump

    rank, local_rank, attempt = rank_hints(shown)
    return Source(
        name=shown, path=path, size=st.st_size, compressed=compressed, rank_hint=rank,
        local_rank_hint=local_rank, attempt=attempt, flight=looks_like_dump(head),
    )


def resolve(inputs: list[str]) -> list[Source]:
    """Sources for the given paths; '-' is stdin. Directories are walked in natural order."""
    sources: list[Source] = []
    for given in inputs:
        if given == "-":
            sources.append(Source(name="<stdin>", path=None, size=None))
            continue
        path = Path(given)
        try:
            st = path.stat()
        except FileNotFoundError:
            raise InputError(f"{given}: no such file or directory") from None
        except OSError as exc:
            raise InputError(_describe_os_error(given, exc)) from None
        if stat.S_ISDIR(st.st_mode):
            files = sorted(
                (p for p in path.rglob("*") if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)),
                key=_natural,
            )
            if not files:
                raise InputError(f"{given}: the directory holds no files")
            sources.extend(_file_source(p, str(p)) for p in files)
        elif stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode):
            sources.append(_file_source(path, given) if stat.S_ISREG(st.st_mode) else Source(name=given, path=path, size=None))
        else:
            raise InputError(f"{given}: not a regular file or directory")
    return sources


def open_source(source: Source, stdin: BinaryIO | None = None) -> BinaryIO:
    """A binary stream of the source's (decompressed) bytes."""
    if source.path is None:
        if stdin is None:
            raise InputError("<stdin>: no standard input")
        if source.compressed:
            return gzip.GzipFile(fileobj=stdin)
        return stdin
    try:
        if source.compressed:
            return gzip.open(source.path, "rb")
        return open(source.path, "rb", buffering=0)
    except OSError as exc:
        raise InputError(_describe_os_error(source.name, exc)) from None


def stdin_is_terminal(stdin) -> bool:
    try:
        return os.isatty(stdin.fileno())
    except (AttributeError, OSError, ValueError):
        return False
