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


_PLAIN_VALUE = re.compile(r"[\w./:,@+%-]*")


def env_file_edit(path: str, before: str | None, env) -> FileEdit | None:
    """Set each variable in an env file in the file's own form: an existing line is replaced in place (its `export`
    or none, its line ending), a new one appended. A file of bare NAME=value lines (`docker run --env-file`, compose's
    .env, systemd's EnvironmentFile) gets bare lines: those readers take no `export` and no shell quoting."""
    text = before or ""
    bare = bool(re.search(r"^[A-Za-z_]\w*=", text, re.M)) and not re.search(r"^\s*export\s", text, re.M)
    newline = "\r\n" if "\r\n" in text else "\n"
    for name, value in env:
        quoted = value if bare and _PLAIN_VALUE.fullmatch(value) else shlex.quote(value)
        pattern = re.compile(rf"^(?P<export>export\s+)?{re.escape(name)}=[^\r\n]*", re.M)
        if pattern.search(text):
            text = pattern.sub(lambda m: f"{m.group('export') or ''}{name}={quoted}", text, count=1)
        else:
            line = f"{name}={quoted}" if bare else f"export {name}={quoted}"
            text += ("" if not text or text.endswith("\n") else newline) + line + newline
    if before is not None and text == before:
        return None
    return FileEdit(path=path, before_sha256=sha256_text(before), before=before or "", after=text)
