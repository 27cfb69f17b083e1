"""Environment fixes: the variables to export, filled with facts, and an env file the launch can source."""
from __future__ import annotations

import re
import shlex

from gpudoctor.engine.fixes.model import FileEdit, sha256_text

_FACT = re.compile(r"\{(\w+)\}")


def fill(template: str, facts: dict, missing: list[str]) -> str:
    def sub(m):
        value = facts.get(m.group(1))
        if value in (None, ""):
            missing.append(m.group(1))
            return m.group(0)
        return str(value)

    return _FACT.sub(sub, template)


def env_values(action, facts: dict) -> tuple[tuple[tuple[str, str], ...], list[str]]:
    """(name, value) pairs of an env action and the facts it still lacks."""
    missing: list[str] = []
    pairs = tuple((name, fill(str(value), facts, missing)) for name, value in action.param("env", ()))
    return pairs, missing


def export_lines(env) -> list[str]:
    return [f"export {name}={shlex.quote(value)}" for name, value in env]


def env_file_edit(path: str, before: str | None, env) -> FileEdit | None:
    """Set each variable in a sourceable env file: an existing line is replaced in place, a new one appended."""
    text = before or ""
    for name, value in env:
        line = f"export {name}={shlex.quote(value)}"
        pattern = re.compile(rf"^(?:export\s+)?{re.escape(name)}=.*$", re.M)
        if pattern.search(text):
            text = pattern.sub(lambda _m: line, text, count=1)
        else:
            text += ("" if not text or text.endswith("\n") else "\n") + line + "\n"
    if before is not None and text == before:
        return None
    return FileEdit(path=path, before_sha256=sha256_text(before), before=before or "", after=text)
