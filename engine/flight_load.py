"""Read PyTorch flight recorder dumps (pickle, JSON, gzip) into frozen records, unpickling nothing but plain data."""
from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import re
import zlib
from dataclasses import dataclass

# Enough for a 2000-entry buffer with stack traces many times over; a cap keeps a gzip bomb from filling memory.
MAX_DUMP_BYTES = 512 * 1024 * 1024
from gpudoctor.engine.tracebacks import Frame, is_user_path
from gpudoctor.engine.flight_sniff import _GZIP_MAGIC, _TOP_KEYS, SNIFF_BYTES, looks_like_dump  # noqa: F401
_RANK_IN_NAME = re.compile(r"(\d+)$")
_NAME_SUFFIXES = (".gz", ".json", ".pkl", ".pickle", ".bin", ".txt")


class FlightError(Exception):
    """A file that cannot be read as a flight recorder dump; names the file."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True)
class Record:
    """One recorded operation, as one rank enqueued it."""

    record_id: int
    pg_id: int
    pg_name: str
    pg_desc: str
    collective_seq_id: int
    p2p_seq_id: int
    op_id: int
    is_p2p: bool
    profiling_name: str  # "nccl:all_reduce", "gloo:broadcast", "nccl:send 0->1"
    op: str  # the profiling name without backend or peer: "all_reduce"
    input_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_sizes: tuple[tuple[int, ...], ...]
    output_dtypes: tuple[str, ...]
    state: str  # scheduled | started | completed
    retired: bool | None
    time_created_ns: int | None
    timeout_ms: int | None
    frames: tuple[Frame, ...]  # innermost last, as torch records them


@dataclass(frozen=True)
class PgStatus:
    pg_id: str
    last_enqueued: int | None
    last_started: int | None
    last_completed: int | None


@dataclass(frozen=True)
class PgConfig:
    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class Dump:
    path: str
    rank: int | None  # from the file name, as torch's own analyzer does; the dump itself does not say
    format: str  # "pickle" | "json"
    compressed: bool
    version: str
    comm_lib_version: str
    entries: tuple[Record, ...]
    pg_config: tuple[PgConfig, ...]
    pg_status: tuple[PgStatus, ...]


def rank_from_path(path: str) -> int | None:
    """`nccl_trace_rank_3`, `trace_3.json.gz` -> 3: the writer names each file `<prefix><rank>`."""
    name = os.path.basename(path)
    stripped = True
    while stripped:
        stripped = False
        for suffix in _NAME_SUFFIXES:
            if name.lower().endswith(suffix):
                name, stripped = name[: -len(suffix)], True
    match = _RANK_IN_NAME.search(name)
    return int(match.group(1)) if match else None


def load_dump(path: str | os.PathLike, rank: int | None = None) -> Dump:
    """Read one rank's dump; `rank` overrides the rank taken from the file name."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_DUMP_BYTES + 1)
    except OSError as exc:
        raise FlightError(path, f"cannot read: {exc.strerror or exc}") from None
    return parse_dump(data, path, rank)


def parse_dump(data: bytes, path: str, rank: int | None = None) -> Dump:
    """Decode a dump held in memory; `path` is only for messages and the rank."""
    if len(data) > MAX_DUMP_BYTES:
        raise FlightError(path, f"larger than {MAX_DUMP_BYTES >> 20} MiB; not reading it")
    compressed = data.startswith(_GZIP_MAGIC)
    if compressed:
        data = _gunzip(data, path)
    if not data.strip():
        raise FlightError(path, "empty file")
    if data[0] == 0x80:
        raw, fmt = _unpickle(data, path), "pickle"
    elif data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
        raw, fmt = _load_json(data, path), "json"
    else:
        raise FlightError(path, "neither a pickle nor a JSON flight recorder dump")
    if rank is None:
        rank = rank_from_path(path)
    return _to_dump(raw, path, rank, fmt, compressed)


def _gunzip(data: bytes, path: str) -> bytes:
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            out = f.read(MAX_DUMP_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise FlightError(path, f"corrupt or truncated gzip data ({exc})") from None
    if len(out) > MAX_DUMP_BYTES:
        raise FlightError(path, f"decompresses to more than {MAX_DUMP_BYTES >> 20} MiB; not reading it")
    return out


class _PlainDataUnpickler(pickle.Unpickler):
    """Builds only dicts, lists, tuples, strings, bytes, numbers, bools and None.

    Every way a pickle can run code (REDUCE, BUILD, INST, OBJ, NEWOBJ, EXT*) first needs a callable, and the
    only source of one is `find_class`; refusing every global therefore refuses all code. torch writes its
    dumps at protocol 2 with no globals at all (checked with pickletools on torch 2.13 gloo dumps), so
    nothing needs allowing, not even `_codecs.encode`, which protocol 2 uses for bytes.
    """

    def find_class(self, module: str, name: str):
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid):
        raise _Refused("a persistent id")


class _Refused(Exception):
    pass


def _unpickle(data: bytes, path: str) -> object:
    try:
        return _PlainDataUnpickler(io.BytesIO(data)).load()
    except _Refused as exc:
        raise FlightError(
            path,
            f"refused to unpickle: it asks for {exc}, and a flight recorder dump holds only plain "
            "containers, strings and numbers (nothing in it was run)",
        ) from None
    except Exception as exc:  # noqa: BLE001 - untrusted bytes can raise almost anything from inside pickle
        raise FlightError(path, f"corrupt or truncated pickle ({type(exc).__name__}: {_clip(str(exc))})") from None


def _load_json(data: bytes, path: str) -> object:
    try:
        return json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise FlightError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise FlightError(path, f"corrupt or truncated JSON ({where}: {exc.msg})") from None
    except RecursionError:
        raise FlightError(path, "JSON nested too deeply") from None


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _describe(value: object) -> str:
    """A short, safe description for messages: repr of a nested or huge value could itself blow up."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if abs(value) < 10**30 else "a very large integer"
    if isinstance(value, str):
        return repr(_clip(value, 40))
    return f"a {type(value).__name__}"


class _Bad(Exception):
    """A field with the wrong shape; the message starts with the field's location."""


def _to_dump(raw: object, path: str, rank: int | None, fmt: str, compressed: bool) -> Dump:
    if not isinstance(raw, dict):
        raise FlightError(path, f"not a flight recorder dump (top level is {_describe(raw)}, not a dict)")
    if not any(key in raw for key in _TOP_KEYS):
        raise FlightError(path, "not a flight recorder dump (no 'entries', 'pg_status' or 'pg_config')")
    try:
        raw_entries = raw.get("entries", [])
        if not isinstance(raw_entries, list):
            raise _Bad(f"entries: expected a list, got {_describe(raw_entries)}")
        entries = tuple(_entry(e, f"entries[{i}]") for i, e in enumerate(raw_entries))
        return Dump(
            path=path, rank=rank, format=fmt, compressed=compressed,
            version=_text(raw.get("version", ""), "version"),
            comm_lib_version=_text(raw.get("comm_lib_version", ""), "comm_lib_version"),
            entries=entries,
            pg_config=_pg_config(raw.get("pg_config", {})),
            pg_status=_pg_status(raw.get("pg_status", {})),
        )
    except _Bad as exc:
        raise FlightError(path, str(exc)) from None


def _entry(raw: object, where: str) -> Record:
    if not isinstance(raw, dict):
        raise _Bad(f"{where}: expected a dict, got {_describe(raw)}")
    for key in ("process_group", "collective_seq_id", "profiling_name"):
        if key not in raw:
            raise _Bad(f"{where}: missing '{key}'")
    pg = raw["process_group"]
    if isinstance(pg, (list, tuple)) and len(pg) == 2:
        pg_name, pg_desc = _text(pg[0], f"{where}.process_group[0]"), _text(pg[1], f"{where}.process_group[1]")
    else:
        pg_name, pg_desc = _text(pg, f"{where}.process_group"), "undefined"
    profiling_name = _text(raw["profiling_name"], f"{where}.profiling_name")
    op = _op_name(profiling_name)
    is_p2p = raw.get("is_p2p")
    return Record(
        record_id=_int(raw.get("record_id", 0), f"{where}.record_id"),
        pg_id=_int(raw.get("pg_id", 0), f"{where}.pg_id"),
        pg_name=pg_name,
        pg_desc=pg_desc,
        collective_seq_id=_int(raw["collective_seq_id"], f"{where}.collective_seq_id"),
        p2p_seq_id=_int(raw.get("p2p_seq_id", 0), f"{where}.p2p_seq_id"),
        op_id=_int(raw.get("op_id", 0), f"{where}.op_id"),
        # dumps before torch 2.5 have no is_p2p; the profiling name still says send/recv
        is_p2p=bool(is_p2p) if isinstance(is_p2p, bool) else op in ("send", "recv"),
        profiling_name=profiling_name,
        op=op,
        input_sizes=_sizes(raw.get("input_sizes", []), f"{where}.input_sizes"),
        input_dtypes=_texts(raw.get("input_dtypes", []), f"{where}.input_dtypes"),
        output_sizes=_sizes(raw.get("output_sizes", []), f"{where}.output_sizes"),
        output_dtypes=_texts(raw.get("output_dtypes", []), f"{where}.output_dtypes"),
        state=_text(raw.get("state", "unknown"), f"{where}.state"),
        retired=raw["retired"] if isinstance(raw.get("retired"), bool) else None,
        time_created_ns=_opt_int(raw.get("time_created_ns"), f"{where}.time_created_ns"),
        timeout_ms=_opt_int(raw.get("timeout_ms"), f"{where}.timeout_ms"),
        frames=_frames(raw.get("frames", []), f"{where}.frames"),
    )


def _op_name(profiling_name: str) -> str:
    name = profiling_name.split(":", 1)[-1].strip()
    return name.split(" ", 1)[0] if name else profiling_name


def _text(value: object, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise _Bad(f"{where}: expected text, got {_describe(value)}")


def _texts(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise _Bad(f"{where}: expected a list, got {_describe(value)}")
    return tuple(_text(v, f"{where}[{i}]") for i, v in enumerate(value))


def _int(value: object, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    # the JSON writer turns some counters into strings ("3", "-1")
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,30}", value.strip()):
        return int(value)
    raise _Bad(f"{where}: expected an integer, got {_describe(value)}")


def _opt_int(value: object, where: str) -> int | None:
    # the JSON writer has 0 where the pickle has None for "never observed"
    return None if value is None else _int(value, where)


def _sizes(value: object, where: str) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, (list, tuple)):
        raise _Bad(f"{where}: expected a list of shapes, got {_describe(value)}")
    out = []
    for i, shape in enumerate(value):
        if not isinstance(shape, (list, tuple)):
            raise _Bad(f"{where}[{i}]: expected a shape (list of integers), got {_describe(shape)}")
        out.append(tuple(_int(d, f"{where}[{i}][{j}]") for j, d in enumerate(shape)))
    return tuple(out)


def _frames(value: object, where: str) -> tuple[Frame, ...]:
    if not isinstance(value, (list, tuple)):
        raise _Bad(f"{where}: expected a list, got {_describe(value)}")
    frames = []
    for i, frame in enumerate(value):
        if not isinstance(frame, dict):
            raise _Bad(f"{where}[{i}]: expected a dict, got {_describe(frame)}")
        line = frame.get("line")
        filename = _text(frame.get("filename", "?"), f"{where}[{i}].filename")
        frames.append(Frame(
            file=filename,
            line=None if line is None else _int(line, f"{where}[{i}].line"),
            function=_text(frame.get("name", "?"), f"{where}[{i}].name"),
            source=None,
            is_user=is_user_path(filename),
        ))
    return tuple(frames)


def _pg_config(value: object) -> tuple[PgConfig, ...]:
    if not isinstance(value, dict):
        raise _Bad(f"pg_config: expected a dict, got {_describe(value)}")
    out = []
    for key, cfg in value.items():
        where = f"pg_config[{_describe(key)}]"
        if not isinstance(cfg, dict):
            raise _Bad(f"{where}: expected a dict, got {_describe(cfg)}")
        ranks = cfg.get("ranks", "[]")
        if isinstance(ranks, str):
            # torch writes the member list as the text "[0, 1, 2]"; read the numbers without eval
            parsed = tuple(int(r) for r in re.findall(r"-?\d{1,12}", ranks))
        else:
            parsed = tuple(_int(r, f"{where}.ranks[{i}]") for i, r in enumerate(_as_list(ranks, f"{where}.ranks")))
        out.append(PgConfig(
            name=_text(cfg.get("name", key), f"{where}.name"),
            desc=_text(cfg.get("desc", ""), f"{where}.desc"),
            ranks=parsed,
        ))
    return tuple(out)


def _as_list(value: object, where: str) -> list | tuple:
    if not isinstance(value, (list, tuple)):
        raise _Bad(f"{where}: expected a list, got {_describe(value)}")
    return value


def _pg_status(value: object) -> tuple[PgStatus, ...]:
    if not isinstance(value, dict):
        raise _Bad(f"pg_status: expected a dict, got {_describe(value)}")
    out = []
    for key, status in value.items():
        where = f"pg_status[{_describe(key)}]"
        if not isinstance(status, dict):
            raise _Bad(f"{where}: expected a dict, got {_describe(status)}")
        out.append(PgStatus(
            pg_id=key if isinstance(key, str) else str(_int(key, f"{where} key")),
            last_enqueued=_counter(status, "last_enqueued_collective", where),
            last_started=_counter(status, "last_started_collective", where),
            last_completed=_counter(status, "last_completed_collective", where),
        ))
    return tuple(out)


def _counter(status: dict, name: str, where: str) -> int | None:
    raw = status.get(name)
    return None if raw is None else _int(raw, f"{where}.{name}")
