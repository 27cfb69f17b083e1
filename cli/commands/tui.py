"""`gpudoctor tui`: open the interactive session, optionally on logs (or a log piped in) and a training script."""
from __future__ import annotations

import os
import sys

from gpudoctor.common import load
from gpudoctor.errors import UserError

HELP = "open the interactive session (gpudoctor alone does this on a terminal)"
DESCRIPTION = """\
Search the catalogue by symptom, read entries, diagnose logs with the evidence
lines lit and every rank on a timeline, run probes, and preview, apply and undo
fixes, from one keyboard-driven screen. F1 or ? inside shows every key.

examples:
  gpudoctor tui
  gpudoctor tui logs/                       # per-rank logs (torchrun --log-dir)
  kubectl logs trainer-0 | gpudoctor tui -  # read first, then keys from the tty
  gpudoctor tui --script train.py           # its lint findings, each with a fix
  gpudoctor tui rank3.log --script train.py # the script confirms the cause
                                            # (--cmd "torchrun ..." likewise)
  gpudoctor diagnose --tui rank*.log        # diagnose, opened in the session

exit codes: 0 closed normally, 2 usage or input error (or no terminal)"""


def add_arguments(parser) -> None:
    parser.add_argument("logs", nargs="*", metavar="LOG", help="logs to open: files, directories, .gz; - reads stdin")
    parser.add_argument("--script", metavar="FILE", help="a training script to check and fix")
    parser.add_argument("--cmd", metavar="CMD", help="the launch command: checked beside the logs (as diagnose --cmd)")


def run(args, out) -> int:
    return launch(args, args.logs, script=args.script)


def launch(args, logs: list[str], script: str | None = None) -> int:
    """Validate the inputs, read a piped log, then hand the terminal to the app; returns the exit code."""
    from gpudoctor.engine.sources import InputError, resolve_some

    if getattr(args, "json", False):
        raise UserError("--json has no meaning in the interactive session: use gpudoctor diagnose --json")
    stream = getattr(args, "stdout_stream", None) or getattr(args, "_out_stream", None)
    logs = list(logs)
    names: dict[str, str] = {}
    others = [p for p in logs if p != "-"]
    if others:
        try:
            resolve_some(others)  # what is left out beside readable logs (a train.py) is noted in the session
        except InputError as exc:
            raise UserError(str(exc)) from None
    if script is not None and not os.path.isfile(script):
        raise UserError(f"{script}: no such file (--script takes a training script)")
    cmd = getattr(args, "cmd", None)
    if cmd:
        from gpudoctor.engine.fixes.errors import FixError
        from gpudoctor.engine.lint.command import check_command

        try:
            check_command(cmd)
        except FixError as exc:
            raise UserError(str(exc)) from None
    if not _stdout_is_terminal(stream):
        raise UserError("the interactive session needs a terminal; for scripts use diagnose, search or show")
    spooled = None
    if "-" in logs:
        stdin = getattr(args, "stdin", None) or sys.stdin.buffer
        if os.isatty(stdin.fileno()):
            raise UserError("- reads a piped log, but nothing is piped in (kubectl logs POD | gpudoctor tui -)")
        spooled = _spool(stdin)
        names[spooled] = "<stdin>"
        logs = [spooled if p == "-" else p for p in logs]
        _reattach_terminal()
    elif not os.isatty(0):
        _reattach_terminal()
    catalog = load(args)
    from gpudoctor.tui import make_app

    app = make_app(catalog, logs=logs, script=script, names=names, cmd=cmd)
    try:
        app.run()
    finally:
        if spooled is not None:
            os.unlink(spooled)
    return app.return_code or 0


def _stdout_is_terminal(stream) -> bool:
    stream = stream or sys.stdout
    try:
        return stream.isatty() and sys.__stdout__ is not None and sys.__stdout__.isatty()
    except (AttributeError, ValueError):
        return False


def _spool(stdin) -> str:
    """Copy the piped log to a temporary file (streamed: any size), so that the log view can map it."""
    import shutil
    import tempfile

    fd, path = tempfile.mkstemp(prefix="gpudoctor-stdin-", suffix=".log")
    try:
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(stdin, out, 1 << 20)
    except OSError as exc:
        os.unlink(path)
        raise UserError(f"<stdin>: read failed: {exc.strerror or exc}") from None
    return path


def _reattach_terminal() -> None:
    """Keys come from the terminal, not the pipe: put /dev/tty on file descriptor 0 for Textual's driver."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR)
    except OSError:
        raise UserError("no terminal to read keys from (/dev/tty cannot be opened)") from None
    os.dup2(fd, 0)
    os.close(fd)
