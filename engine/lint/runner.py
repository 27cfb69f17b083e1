"""Run the checks over sources, files and folders (in parallel), honouring ignore comments and --select."""
from __future__ import annotations

import importlib.util
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from functools import lru_cache

from gpudoctor.engine.lint.checks import ALL
from gpudoctor.engine.lint.model import LintFinding, LintResult
from gpudoctor.engine.lint.script import Script

PY_SUFFIXES = (".py", ".pyw")
SHELL_SUFFIXES = (".sh", ".bash", ".slurm", ".sbatch")
SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", ".venv", "venv", "node_modules", ".tox", ".mypy_cache",
             "site-packages", ".eggs", "build", "dist"}
IGNORE = re.compile(r"#\s*gpudoctor:\s*ignore(?:\[([^\]]*)\])?", re.IGNORECASE)
PARALLEL_MIN_FILES = 24  # below this, starting workers costs more than it saves
INTERNAL = "internal error:"  # prefix of an error that is gpudoctor's fault (exit 3), not the file's


class _Shell:
    def __init__(self, text: str, path: str):
        self.text, self.path = text, path


def _wanted(check, select, ignore) -> bool:
    keys = {check.code.upper(), check.slug}
    if select and not keys & select:
        return False
    return not (ignore and keys & ignore)


def _norm(codes) -> frozenset[str]:
    out = set()
    for item in codes or ():
        for part in str(item).split(","):
            part = part.strip()
            if part:
                out.add(part if "-" in part else part.upper())
    return frozenset(out)


def language_of(path: str, text: str) -> str:
    if path.endswith(SHELL_SUFFIXES):
        return "shell"
    first = text.split("\n", 1)[0]
    if first.startswith("#!") and "python" not in first and re.search(r"\b(ba|z|k|da)?sh\b", first):
        return "shell"
    return "python"


def _findings(text: str, path: str, select, ignore) -> list[LintFinding]:
    lang = language_of(path, text)
    checks = [c for c in ALL if lang in c.languages and _wanted(c, select, ignore)]
    if not checks:
        return []
    script = Script(text, path) if lang == "python" else _Shell(text, path)
    lines = text.splitlines()
    out = []
    for check in checks:
        try:
            hits = list(check.find(script))
        except (SyntaxError, RecursionError):
            raise
        except Exception as exc:  # a bug in one check must not hide the others' findings
            raise CheckCrashed(f"{INTERNAL} check {check.code} failed: {type(exc).__name__}: {exc}") from exc
        for hit in hits:
            if _silenced(lines, hit.line, check):
                continue
            out.append(LintFinding(path, hit.line, hit.col, check.code, hit.slug or check.slug, hit.severity or check.severity,
                                   hit.message))
    return out


class CheckCrashed(Exception):
    """A check raised: reported as an internal error for that file, the other files still linted."""


def _silenced(lines: list[str], line: int, check) -> bool:
    if not 0 < line <= len(lines):
        return False
    m = IGNORE.search(lines[line - 1])
    if not m:
        return False
    if m.group(1) is None:
        return True
    codes = {c.strip() for c in m.group(1).split(",")}
    return check.code in codes or check.code.upper() in {c.upper() for c in codes} or check.slug in codes


def lint_source(text: str, path: str = "<string>", *, select=None, ignore=None, kb_dirs=None) -> LintResult:
    """Lint one script given as text; a syntax error is reported in errors, not raised."""
    findings, error = _lint_text(text, path, _norm(select), _norm(ignore))
    return LintResult(tuple(_with_fix_ids(findings, kb_dirs)), ((path, error),) if error else (), 1)


def _lint_text(text, path, select, ignore):
    try:
        return _findings(text, path, select, ignore), None
    except SyntaxError as exc:
        where = f" (line {exc.lineno})" if exc.lineno else ""
        return [], f"does not parse: {exc.msg}{where}"
    except CheckCrashed as exc:
        return [], str(exc).splitlines()[0]
    except (ValueError, RecursionError) as exc:
        return [], f"cannot be analysed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"


def _lint_file(args) -> tuple[list[LintFinding], str | None]:
    path, select, ignore = args
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        return [], exc.strerror or str(exc)
    if str(path).endswith(".ipynb"):
        return _lint_notebook(raw, path, select, ignore)
    try:
        text = importlib.util.decode_source(raw)
    except (UnicodeDecodeError, SyntaxError, LookupError) as exc:
        return [], f"not readable as text: {exc}".splitlines()[0]
    return _lint_text(text, path, select, ignore)


def _lint_notebook(raw: bytes, path, select, ignore):
    """The notebook's code cells linted as one script; each finding says its cell and the line within it."""
    from gpudoctor.engine.lint.notebook import NotANotebook, notebook_script

    try:
        text, where = notebook_script(raw)
    except NotANotebook as exc:
        return [], str(exc)
    found, error = _lint_text(text, path, select, ignore)
    if error:
        line = next((int(w) for w in error.rsplit("(line ", 1)[1:] for w in [w.rstrip(")")] if w.isdigit()), None)
        if line is not None and 0 < line <= len(where):
            error = error.rsplit(" (line ", 1)[0] + f" (cell {where[line - 1][0]}, line {where[line - 1][1]})"
        return found, error
    out = []
    for f in found:
        cell, at = where[f.line - 1] if 0 < f.line <= len(where) else (0, 0)
        out.append(replace(f, message=f"cell {cell}, line {at}: {f.message}") if cell else f)
    return out, None


def expand(paths) -> tuple[list[str], list[tuple[str, str]]]:
    """Files to lint from files and folders (folders: *.py and shell launch scripts), and paths that are missing."""
    files, errors, seen = [], [], set()
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            for root, dirs, names in os.walk(p):
                dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
                # real files before links, so that a file reached both ways is reported under its own name
                for n in sorted(names, key=lambda n: (os.path.islink(os.path.join(root, n)), n)):
                    path = os.path.join(root, n)
                    if not n.endswith(PY_SUFFIXES + SHELL_SUFFIXES):
                        continue
                    try:  # a walked folder's broken link (a stale latest.py, an editor's lock) is no file to lint,
                        key = os.stat(path)  # and a link to a file already walked is that file again
                    except OSError:
                        continue
                    if (key.st_dev, key.st_ino) not in seen:
                        seen.add((key.st_dev, key.st_ino))
                        files.append(path)
        elif os.path.exists(p):
            files.append(p)
        else:
            errors.append((p, "no such file or directory"))
    return files, errors


def lint_paths(paths, *, select=None, ignore=None, jobs: int | None = None, kb_dirs=None) -> LintResult:
    """Lint files and folders; folders are walked and their files linted by `jobs` worker processes."""
    files, errors = expand(paths)
    files = list(dict.fromkeys(files))  # a file named twice (or inside two given folders) is linted once
    select, ignore = _norm(select), _norm(ignore)
    jobs = jobs or min(2, os.cpu_count() or 1)
    work = [(f, select, ignore) for f in files]
    if jobs > 1 and len(files) >= PARALLEL_MIN_FILES:
        import multiprocessing
        import threading

        # fork is the cheapest start, but only safe while this process has a single thread (the TUI has more)
        method = "fork" if os.name == "posix" and threading.active_count() == 1 else "spawn"
        ctx = multiprocessing.get_context(method)
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            results = list(pool.map(_lint_file, work, chunksize=max(1, len(work) // (jobs * 8))))
    else:
        results = [_lint_file(w) for w in work]
    findings = []
    for f, (found, error) in zip(files, results):
        findings.extend(found)
        if error:
            errors.append((f, error))
    findings.sort(key=lambda x: (x.path, x.line, x.col, x.entry_id))
    return LintResult(tuple(_with_fix_ids(findings, kb_dirs)), tuple(errors), len(files))


@lru_cache(maxsize=4)
def fix_ids(kb_dirs: tuple[str, ...] = ()) -> dict[str, str]:
    """entry id -> id of its first `kind: patch` fix action, from the catalogue (read once, when needed)."""
    try:
        from gpudoctor.kb.catalog import load_catalog

        catalog = load_catalog(list(kb_dirs) or None)
    except Exception:  # a broken user catalogue must not stop the lint; the ids are a convenience
        return {}
    out = {}
    for entry_id, entry in catalog.entries.items():
        action = next((a for a in entry.fix_actions if a.kind == "patch"), None)
        if action is not None:
            out[entry_id] = action.id
    return out


def _with_fix_ids(findings, kb_dirs=None):
    if not findings:
        return findings
    ids = fix_ids(tuple(kb_dirs or ()))
    from dataclasses import replace

    from gpudoctor.engine.lint.checks import BY_SLUG

    # an entry's code patch fixes what its script check finds, not what a launch-command check finds (D1 no-launcher)
    return [replace(f, fix_id=ids.get(f.entry_id) if f.rule in BY_SLUG else None) for f in findings]
