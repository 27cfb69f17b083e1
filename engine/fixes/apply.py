"""The one module that writes user files: check hashes against the preview, back up, write atomically, journal for undo."""
from __future__ import annotations

import ast
import hashlib
import json
import os
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gpudoctor.engine.fixes.errors import BrokenResultError, FixError, NothingRecorded, StaleFileError
from gpudoctor.engine.fixes.model import FixPlan

JOURNAL_FORMAT = 1


@dataclass(frozen=True)
class ApplyResult:
    written: tuple[str, ...]  # files changed now
    unchanged: tuple[str, ...]  # files that already had the fix (applying twice is a no-op)
    skipped: tuple[tuple[str, str], ...]  # (action id, why it was not applied)
    journal: str | None  # the undo record, None when nothing was written


@dataclass(frozen=True)
class UndoResult:
    restored: tuple[str, ...]  # files put back as they were (or removed, when the fix created them)
    journal: str


def state_dir(path=None) -> Path:
    """GPUDOCTOR_STATE_DIR, else $XDG_STATE_HOME/gpudoctor, else ~/.local/state/gpudoctor."""
    if path:
        return Path(path)
    if os.environ.get("GPUDOCTOR_STATE_DIR"):
        return Path(os.environ["GPUDOCTOR_STATE_DIR"])
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "gpudoctor"


def _sha(data: bytes | None) -> str:
    return "" if data is None else hashlib.sha256(data).hexdigest()


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FixError(f"{path}: cannot read ({exc.strerror or exc})") from None


def check_parses(path: str, text: str) -> None:
    """Refuse a result that no longer parses as what the file is (Python, JSON, YAML)."""
    text = text.removeprefix("\ufeff")
    try:
        if path.endswith(".py"):
            ast.parse(text, filename=path)
        elif path.endswith(".json"):
            json.loads(text)
        elif path.endswith((".yaml", ".yml")):
            import yaml

            yaml.safe_load(text)
    except Exception as exc:  # SyntaxError, JSONDecodeError, YAMLError: all mean "would be broken"
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BrokenResultError(f"{path}: the fix would leave a file that does not parse ({first}); nothing written") from None


def write_atomic(path: str, data: bytes, mode: int | None) -> None:
    """Write to a temp file in the same folder, fsync, keep the mode and the owner, then rename over the target.
    A file with other hard links is rewritten in place instead (a rename would leave the links with the old text);
    a new file gets the mode the umask gives (it is often copied to every node), not mkstemp's 0600."""
    try:
        old = os.stat(path)
    except OSError:
        old = None
    if old is not None and old.st_nlink > 1 and stat.S_ISREG(old.st_mode):
        with open(path, "r+b") as fh:  # the journal holds the backup; the links stay one file
            fh.write(data)
            fh.truncate()
            fh.flush()
            os.fsync(fh.fileno())
        return
    if mode is None and old is None:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".gpudoctor-tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        if old is not None and (old.st_uid, old.st_gid) != (os.getuid(), os.getgid()):
            try:  # root (or sudo) editing someone's script: it stays theirs
                os.chown(tmp, old.st_uid, old.st_gid)
            except OSError:
                pass
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _mode(path: str) -> int | None:
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        return None


def apply_plan(plan: FixPlan, *, unsafe: bool = False, state_dir=None) -> ApplyResult:
    """Write the plan's safe edits (and unsafe ones when allowed); display-only fixes are never written."""
    chosen = plan.applicable(unsafe)
    skipped = tuple((f.action_id, "display-only: shown, never applied" if f.safety == "display-only"
                     else "unsafe: pass --unsafe to apply it")
                    for f in plan.fixes if f.edits and f not in chosen)
    per_path: dict[str, list] = {}
    for fix in chosen:
        for edit in fix.edits:
            per_path.setdefault(edit.path, []).append(edit)
    # every check first: nothing is written unless every file can be
    todo, unchanged = [], []
    for shown, edits in per_path.items():
        path = os.path.realpath(shown)  # through a symlink to the file it names; the link stays a link
        current = _read(path)
        final = edits[-1].after
        if current is not None and current == final.encode("utf-8"):
            unchanged.append(shown)
            continue
        first = edits[0]
        if _sha(current) != first.before_sha256:
            what = "exists now" if first.creates else ("no longer exists" if current is None else "changed")
            raise StaleFileError(f"{shown}: {what} since the preview", "run gpudoctor fix again for a fresh diff")
        for a, b in zip(edits, edits[1:]):
            if b.before != a.after:
                raise FixError(f"internal: the edits of {path} do not follow each other")
        check_parses(shown, final)
        if current is not None and _read_only(path):  # a rename would replace it all the same
            raise FixError(f"{shown}: read-only; nothing was written (make it writable first if the fix is wanted)")
        todo.append((shown, path, current, final.encode("utf-8"), _mode(path)))
    if not todo:
        return ApplyResult((), tuple(unchanged), skipped, None)
    journal = _new_journal(state_dir)
    files = []
    for i, (_shown, path, before, after, mode) in enumerate(todo):
        backup = None
        if before is not None:
            backup = f"backup-{i}"
            _write_private(journal / backup, before)
        files.append({"path": path, "backup": backup, "mode": mode,
                      "before_sha256": _sha(before), "after_sha256": _sha(after)})
    manifest = {"format": JOURNAL_FORMAT, "entry": plan.entry_id, "actions": [f.action_id for f in chosen],
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "status": "pending", "files": files}
    _write_manifest(journal, manifest)
    done = []
    try:
        for shown, path, before, after, mode in todo:
            if _sha(_read(path)) != _sha(before):  # saved by an editor while the journal was written
                raise StaleFileError(f"{shown}: changed while the fix was being applied; nothing changed",
                                     "run gpudoctor fix again for a fresh diff")
            write_atomic(path, after, mode)
            done.append((shown, path))
    except (OSError, StaleFileError) as exc:
        for _shown, path in done:  # put back what was already written, so the set is all or nothing
            _restore(next(f for f in files if f["path"] == path), journal)
        manifest["status"] = "rolled-back"
        _write_manifest(journal, manifest)
        if isinstance(exc, StaleFileError):
            raise
        raise FixError(f"{exc.filename or 'a file'}: cannot write ({exc.strerror or exc}); nothing changed") from None
    manifest["status"] = "applied"
    _write_manifest(journal, manifest)
    return ApplyResult(tuple(shown for shown, _ in done), tuple(unchanged), skipped, str(journal))


def _new_journal(base) -> Path:
    root = state_dir(base) / "journal"
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)  # backups hold the user's files: theirs alone to read
        for n in range(1000):
            path = root / f"{stamp}-{n:03d}"
            try:
                path.mkdir(mode=0o700)
                return path
            except FileExistsError:
                continue
    except OSError as exc:  # a read-only or full home, a state folder someone else owns
        raise FixError(f"{root}: cannot create the undo journal ({exc.strerror or exc}); nothing was written. "
                       "Point GPUDOCTOR_STATE_DIR at a folder you can write to") from None
    raise FixError(f"{root}: cannot create an undo journal")


def _read_only(path: str) -> bool:
    """A file its owner marked read-only (no owner write bit: root too is stopped, as an editor warns), or one this
    user cannot write."""
    try:
        return not os.stat(path).st_mode & stat.S_IWUSR or not os.access(path, os.W_OK)
    except OSError:
        return False


def _write_private(path: Path, data: bytes) -> None:
    """A backup only its owner can read, whatever the umask: the file it copies may hold secrets."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _write_manifest(journal: Path, manifest: dict) -> None:
    write_atomic(str(journal / "manifest.json"), json.dumps(manifest, indent=2).encode("utf-8"), None)


def _restore(rec: dict, journal: Path) -> None:
    if rec["backup"] is None:
        try:
            os.unlink(rec["path"])
        except FileNotFoundError:
            pass
    else:
        write_atomic(rec["path"], (journal / rec["backup"]).read_bytes(), rec["mode"])


def _journals(base) -> list[Path]:
    root = state_dir(base) / "journal"
    return sorted(p for p in root.iterdir() if (p / "manifest.json").is_file()) if root.is_dir() else []


def _last_applied(state_dir, verb: str) -> tuple[Path, dict]:
    """The journal folder and manifest of the last fix still applied; FixError naming `verb` when there is none."""
    for journal in reversed(_journals(state_dir)):
        try:
            manifest = json.loads((journal / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if manifest.get("status") == "applied":
            return journal, manifest
    raise NothingRecorded(f"nothing to {verb}: no applied fix is recorded in " + str(state_dir_path(state_dir)))


def undo_last(state_dir=None) -> UndoResult:
    """Put back, byte for byte, the files of the last applied fix; refuses if they changed since."""
    journal, manifest = _last_applied(state_dir, "undo")
    for rec in manifest["files"]:
        now = _read(rec["path"])
        if _sha(now) != rec["after_sha256"]:
            what = ("no longer exists" if now is None and rec["after_sha256"] is not None else
                    "changed since gpudoctor applied the fix; undo would lose those changes")
            raise StaleFileError(f"{rec['path']}: {what} (its copy from before the fix is in {journal}; "
                                 "`gpudoctor fix --forget` drops this fix so that the one before it can be undone)")
    for rec in manifest["files"]:
        _restore(rec, journal)
    manifest["status"] = "undone"
    _write_manifest(journal, manifest)
    return UndoResult(tuple(r["path"] for r in manifest["files"]), str(journal))


def forget_last(state_dir=None) -> str:
    """Mark the last applied fix as forgotten, touching none of its files (its backups stay in its journal folder):
    the way past a fix that can no longer be undone. Returns that journal folder."""
    journal, manifest = _last_applied(state_dir, "forget")
    manifest["status"] = "forgotten"
    _write_manifest(journal, manifest)
    return str(journal)


def state_dir_path(base=None) -> Path:
    return state_dir(base) / "journal"
