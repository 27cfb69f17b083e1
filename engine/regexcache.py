"""Regex programs kept between runs: `re` parses each pattern in pure Python (~0.1 ms), and every
`diagnose` compiles about seventy of them (signatures, prefix rules, the failure-line tests).

`compile(pattern, flags)` returns a real `re.Pattern`. The first run parses the pattern as `re` does and
remembers the program (the opcode list `re` hands to its C engine); later runs hand the stored program
straight to the engine, which checks it (a damaged program is refused and the pattern parsed again). The
table is keyed by the interpreter's exact version, written once at exit when it grew, and skipped with
GPUDOCTOR_NO_CACHE. Each save is a generation: a pattern no run has used in the last KEEP_SAVES saves (a
signature an upgrade or an edited runbook left behind) is dropped, so the table, which every run reads
whole, holds about what today's catalogue compiles rather than every pattern it ever had. Anything unexpected (another Python's `re` internals) falls back to `re.compile`. The
file lives beside the catalogue's pickle cache and is trusted as that one is (both are the user's own).
"""
from __future__ import annotations

import re
import sys

try:  # the parts of `re` that turn a pattern into the program its C engine runs
    import _sre
    from re import _compiler, _parser
except ImportError:  # Python 3.10 names them sre_compile / sre_parse
    try:
        import _sre
        import sre_compile as _compiler
        import sre_parse as _parser
    except ImportError:
        _sre = None

__all__ = ["compile"]

MAX_ENTRIES = 4096  # user runbooks add patterns; a table grown past this starts again
KEEP_SAVES = 16  # saves a pattern may go unused before it is dropped
_table: dict | None = None  # (pattern, flags) -> (generation last used, (flags, code, groups, groupindex, indexgroup))
_generation = 0  # of the table read; a save writes the next one
_used: set = set()  # keys this run compiled from the table
_file = None  # where the table was read from, and is written back to
_added = 0


def compile(pattern: str | bytes, flags: int = 0) -> re.Pattern:  # noqa: A001 - the name says what it is
    flags = int(flags)
    table = _table if _table is not None else _load()
    stored = table.get((pattern, flags))
    if stored is not None:
        try:
            compiled = _sre.compile(pattern, *stored[1])
            _used.add((pattern, flags))
            return compiled
        except Exception:  # noqa: BLE001 - a stale or damaged program: parse the pattern again
            pass
    try:
        compiled, program = _build(pattern, flags)
    except re.error:
        raise
    except Exception:  # noqa: BLE001 - not the `re` this was written for: the plain path
        return re.compile(pattern, flags)
    _remember((pattern, flags), program)
    return compiled


def _build(pattern, flags: int):
    """What re.compile does, keeping the program: (the compiled pattern, its program)."""
    if _sre is None or flags & re.DEBUG or not isinstance(pattern, (str, bytes)):
        raise LookupError("not cacheable")
    parsed = _parser.parse(pattern, flags)
    code = _compiler._code(parsed, flags)
    groupindex = dict(parsed.state.groupdict)
    indexgroup = [None] * parsed.state.groups
    for name, i in groupindex.items():
        indexgroup[i] = name
    # opcodes are int subclasses (named constants): plain ints, for marshal
    program = (int(flags | parsed.state.flags), [int(c) for c in code], parsed.state.groups - 1, groupindex,
               tuple(indexgroup))
    compiled = _sre.compile(pattern, *program)
    if compiled != re.compile(pattern, flags):  # equality compares flags and the whole program
        raise LookupError("program differs from re.compile's")
    return compiled, program


def _path():
    from gpudoctor.kb.catalog import cache_dir

    root = cache_dir()
    if root is None:
        return None
    tag = "".join(c if c.isalnum() else "-" for c in sys.version.split()[0])
    return root / f"regex2-{tag}-{getattr(_sre, 'MAGIC', 0)}.marshal"


def _load() -> dict:
    global _table, _file, _generation
    _table = {}
    path = _file = _path()
    if path is None:
        return _table
    import marshal

    try:
        with open(path, "rb") as fh:
            generation, stored = marshal.loads(fh.read())  # (marshal.load reads a file a few bytes at a time)
        if isinstance(stored, dict) and isinstance(generation, int) and len(stored) <= MAX_ENTRIES:
            _table, _generation = stored, generation
    except (OSError, EOFError, ValueError, TypeError):  # (TypeError: not a pair)
        pass  # no table yet, or a damaged one: rebuilt as patterns are compiled
    return _table


def _remember(key, program) -> None:
    global _added
    if _table is None:
        return
    if len(_table) >= MAX_ENTRIES:  # full of patterns from catalogues long gone: start again
        _table.clear()
    _table[key] = (_generation, program)
    _used.add(key)
    _added += 1
    if _added == 1:
        import atexit

        atexit.register(_save)


def _save() -> None:
    """Write the grown table atomically; a read-only or missing cache folder just means no table."""
    global _added
    path = _file
    if path is None or not _added:
        return
    import marshal
    import os
    import tempfile

    generation = _generation + 1
    tmp = None
    try:
        kept = {key: (generation if key in _used else last, program) for key, (last, program) in _table.items()
                if key in _used or last > generation - KEEP_SAVES}
        data = marshal.dumps((generation, kept))
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".regex-", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
        _added = 0
    except (OSError, ValueError, TypeError):  # (ValueError, TypeError: a damaged table read from disk)
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
