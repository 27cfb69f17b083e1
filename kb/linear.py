"""Runbook signatures matched in linear time: RE2 (google-re2, a default dependency wherever it publishes wheels).

A user's runbook is code gpudoctor did not write: a regex such as `(a|a)*b`, `(.*a){25}` or `a*a*a*a*b` takes
Python's backtracking matcher exponential time on a line that almost matches, and a C-level match cannot be
interrupted, not even by Ctrl-C. RE2 has no backtracking, so no line can stall a match. A user signature RE2 cannot
compile (a lookaround, a backreference) is refused when RE2 is there; where it is not (a platform without its
wheels) the static check of kb/backtracking.py is all there is.
"""
from __future__ import annotations

_OPTIONS = None
_MISSING = object()
_re2 = None


def _module():
    global _re2, _OPTIONS
    if _re2 is None:
        try:
            import re2 as module
        except ImportError:
            _re2 = _MISSING
        else:
            _OPTIONS = module.Options()
            _OPTIONS.log_errors = False  # RE2 would print its parse errors on stderr itself
            _re2 = module
    return None if _re2 is _MISSING else _re2


def available() -> bool:
    return _module() is not None


def compile_linear(pattern: str | bytes, caseless: bool = False, multiline: bool = False):
    """The pattern compiled by RE2 (search, finditer and match objects as `re` has them), or None when RE2 is not
    installed or cannot take the pattern."""
    re2 = _module()
    if re2 is None:
        return None
    flags = ("i" if caseless else "") + ("m" if multiline else "")
    if flags:
        prefix = f"(?{flags})"
        pattern = prefix.encode("ascii") + pattern if isinstance(pattern, bytes) else prefix + pattern
    try:
        return re2.compile(pattern, _OPTIONS)
    except Exception:  # noqa: BLE001 - re2.error, and whatever an odd pattern raises: not linear
        return None


def unsupported(pattern: str) -> str | None:
    """Why RE2 cannot take a pattern (None when it can, or when RE2 is not installed)."""
    re2 = _module()
    if re2 is None:
        return None
    try:
        re2.compile(pattern, _OPTIONS)
    except Exception as exc:  # noqa: BLE001
        text = exc.args[0] if exc.args else exc
        return (text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)) or "not RE2 syntax"
    return None
