"""The command line: parse arguments, dispatch to one command module, map errors to exit codes."""
from __future__ import annotations

import argparse
import importlib
import sys

from gpudoctor import __version__
from gpudoctor.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, UserError


# command name -> module under gpudoctor.commands; each has HELP, add_arguments(parser), run(args, out)
COMMANDS = {
    "diagnose": "diagnose",
    "list": "list_entries",
    "show": "show",
    "search": "search",
    "validate": "validate",
    "probe": "probe",
    "check": "check",
    "tui": "tui",
    "fix": "fix",
    "lint": "lint",
    "stacks": "stacks",
}

DESCRIPTION = """\
Troubleshoot distributed PyTorch training: name the cause of a hang, crash or
wrong result from its logs, confirm it on your machines, and fix it.

exit codes: 0 a result, 1 nothing found or a check failed, 2 bad usage or input,
            3 internal error (a bug; the message names the report file)
environment: NO_COLOR disables colour; GPUDOCTOR_KB adds runbook folders
"""


def _columns() -> int:
    """shutil.get_terminal_size().columns ($COLUMNS, else the terminal's width, else 80) without importing
    shutil, which brings bz2, lzma and zlib: argparse sizes a formatter for every argument it adds."""
    import os

    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Sized:
    def __init__(self, prog, indent_increment=2, max_help_position=24, width=None):
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)


class _PlainFormatter(_Sized, argparse.HelpFormatter):
    pass


class _RawFormatter(_Sized, argparse.RawDescriptionHelpFormatter):
    pass


def _common() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    g = common.add_argument_group("common options")
    g.add_argument("--kb", metavar="DIR", action="append", default=[],
                   help="add or override entries from a folder of YAML runbooks (repeatable; also GPUDOCTOR_KB)")
    g.add_argument("--json", action="store_true", help="print machine-readable JSON")
    colour = g.add_mutually_exclusive_group()
    colour.add_argument("--color", dest="color", action="store_true", default=None, help="force colour")
    colour.add_argument("--no-color", dest="color", action="store_false", help="no colour (also NO_COLOR=1)")
    return common


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _PlainFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # argparse's own exit code for usage errors is 2, as ours
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"gpudoctor: error: {message}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser; with `only`, the other commands are named but their modules not imported
    (start-up time: each command imports what it needs)."""
    parser = _Parser(prog="gpudoctor", description=DESCRIPTION,
                     formatter_class=_RawFormatter)
    parser.add_argument("--version", action="version", version=f"gpudoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    common = _common()
    for name, module_name in COMMANDS.items():
        if only is not None and name != only:  # the command is known: the others need no parser at all
            continue
        module = importlib.import_module(f"gpudoctor.commands.{module_name}")
        p = sub.add_parser(name, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP),
                           parents=[common], formatter_class=_RawFormatter)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None, stdout=None, stderr=None) -> int:
    """Run one command; returns its exit code. stdout/stderr default to the process's streams.

    Never raises: a usage or input problem is one message (exit 2), Ctrl-C and a closed pipe end
    quietly, and anything else is a bug: one line naming a report file with the traceback (exit 3).
    """
    import os

    stdout = stdout or sys.stdout or open(os.devnull, "w")  # started with stdout closed: output goes nowhere
    stderr = stderr or sys.stderr or open(os.devnull, "w")
    argv = sys.argv[1:] if argv is None else list(argv)
    guarded = _PipeGuard(stdout)
    restore = _end_on_signals()
    try:
        code = _run(argv, guarded, stderr)
        if guarded.closed:  # `gpudoctor lint . | head`: the command's own exit code stands
            _silence(stdout)
        return code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except _Ended as ended:  # killed politely (an SSH drop, a time limit): scratch folders and workers go with us
        return ended.code
    except BrokenPipeError:  # a write that did not go through the guard (`gpudoctor list | head` is not an error)
        _silence(stdout)
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - the one place every unexpected error ends
        return _internal_error(exc, argv, stderr)
    finally:
        restore()


class _Ended(BaseException):
    """SIGTERM or SIGHUP arrived: unwinds like Ctrl-C, so that `finally` blocks, pools and atexit clean-ups run."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def _end_on_signals():
    """Turn SIGTERM and SIGHUP into _Ended in the main thread (exit 128 + the signal, as a shell reports it); returns
    what puts the previous handlers back. Elsewhere (a thread, a platform without them) nothing changes."""
    import signal

    previous = {}

    def end(signum, _frame):
        raise _Ended(128 + signum)

    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        try:
            previous[sig] = signal.signal(sig, end)
        except (ValueError, OSError):  # not the main thread (an embedding caller): its handlers stay as they are
            pass

    def restore() -> None:
        for sig, handler in previous.items():
            try:
                signal.signal(sig, handler)
            except (ValueError, OSError, TypeError):
                pass

    return restore


def _run(argv: list[str], stdout, stderr) -> int:
    from gpudoctor.term import Out

    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(first if first in COMMANDS else None)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if not getattr(args, "command", None):
        if argv or not (_isatty(sys.stdin) and _isatty(stdout)):
            parser.print_help(stdout)  # no terminal (a pipe, CI): help, never a hang
            return 0
        args = parser.parse_args(["tui"])
    args._out_stream = stdout
    out = Out.for_stream(stdout, args.color)
    err = Out.for_stream(stderr, args.color)
    args.err = err
    try:
        return int(args._module.run(args, out) or 0)
    except UserError as exc:
        # a message may quote a path or a value the user gave: its control characters are shown, never sent raw
        from gpudoctor.term import sanitize

        message = "\n".join(sanitize(line) for line in str(exc.message).split("\n"))
        err.write(f"{err.style('gpudoctor: error:', 'fail')} {message}")
        return exc.code


class _PipeGuard:
    """Standard output for a command: once its reader has gone (a closed pipe), further writes are dropped, so the
    command finishes and returns its own exit code instead of dying halfway with 0."""

    def __init__(self, stream):
        self._stream = stream
        self.closed = False

    def write(self, text: str) -> int:
        if not self.closed:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self.closed = True
        return len(text)

    def flush(self) -> None:
        if not self.closed:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self.closed = True

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _silence(stream) -> None:
    """Point a closed pipe's descriptor at /dev/null, so that flushing at exit raises nothing more."""
    import os

    try:
        fd = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
    except (OSError, ValueError, AttributeError):
        pass


def _internal_error(exc: BaseException, argv: list[str], stderr) -> int:
    """Write the traceback to a report file under the cache folder and say where, on one line."""
    import datetime
    import os
    import platform
    import tempfile
    import traceback

    from gpudoctor.kb.catalog import cache_dir

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    text = (f"gpudoctor {__version__}, Python {platform.python_version()} on {platform.platform()}\n"
            f"argv: {argv!r}\n\n" + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    report = None
    for folder in (cache_dir(), tempfile.gettempdir()):
        if folder is None:
            continue
        try:
            os.makedirs(folder, exist_ok=True)
            fd, report = tempfile.mkstemp(prefix=f"crash-{stamp}-", suffix=".txt", dir=folder)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            break
        except OSError:
            report = None
    where = f"the details are in {report}" if report else "no report file could be written"
    what = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
    try:
        stderr.write(f"gpudoctor: internal error ({what}); this is a bug: {where}; please attach it when you "
                     f"report the bug\n")
        stderr.flush()
    except Exception:  # noqa: BLE001 - stderr itself is gone: the exit code still says it
        pass
    return EXIT_INTERNAL


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def entry() -> None:
    """Console-script entry point."""
    code = main()
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError, AttributeError):
        _silence(sys.stdout)
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    sys.exit(code)
