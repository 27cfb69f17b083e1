"""The line parsers this engine's newer modules use, from wherever the engine keeps them (prefix/tracebacks or lines/structure)."""
from __future__ import annotations

_found: dict = {}


def _load(name: str, *modules: str):
    """The first of modules that defines name; looked up once."""
    if name not in _found:
        import importlib

        for module in modules:
            try:
                _found[name] = getattr(importlib.import_module(module), name)
                break
            except (ImportError, AttributeError):
                continue
        else:
            raise ImportError(f"no engine module defines {name}")
    return _found[name]


def parse_prefix(line: str):
    return _load("parse_prefix", "gpudoctor.engine.prefix", "gpudoctor.engine.lines")(line)


def parse_tracebacks(lines):
    return _load("parse_tracebacks", "gpudoctor.engine.tracebacks", "gpudoctor.engine.structure")(lines)


def is_user_path(path: str) -> bool:
    return _load("is_user_path", "gpudoctor.engine.tracebacks", "gpudoctor.engine.structure")(path)
