"""The command line: parse arguments, dispatch to one command module, map errors to exit codes."""
from __future__ import annotations

import argparse
import importlib
import sys

from gpudoctor import __version__
from gpudoctor.errors import EXIT_INTERRUPTED, EXIT_USAGE, UserError

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
}

DESCRIPTION = """\
Troubleshoot distributed PyTorch training: name the cause of a hang, crash or
wrong result from its logs, confirm it on your machines, and fix it.

exit codes: 0 a result, 1 nothing found or a check failed, 2 bad usage or input
environment: NO_COLOR disables colour; GPUDOCTOR_KB adds runbook folders
"""


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("common options")
    g.add_argument("--kb", metavar="DIR", action="append", default=[],
                   help="add or override entries from a folder of YAML runbooks (repeatable; also GPUDOCTOR_KB)")
    g.add_argument("--json", action="store_true", help="print machine-readable JSON")
    colour = g.add_mutually_exclusive_group()
    colour.add_argument("--color", dest="color", action="store_true", default=None, help="force colour")
    colour.add_argument("--no-color", dest="color", action="store_false", help="no colour (also NO_COLOR=1)")
    return common


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own exit code for usage errors is 2, as ours
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"gpudoctor: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gpudoctor", description=DESCRIPTION,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"gpudoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    common = _common()
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(f"gpudoctor.commands.{module_name}")
        p = sub.add_parser(name, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP),
                           parents=[common], formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None, stdout=None, stderr=None) -> int:
    """Run one command; returns its exit code. stdout/stderr default to the process's streams."""
    from gpudoctor.term import Out

    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
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
        err.write(f"{err.style('gpudoctor: error:', 'fail')} {exc.message}")
        return exc.code
    except KeyboardInterrupt:
        err.write("gpudoctor: interrupted")
        return EXIT_INTERRUPTED


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def entry() -> None:
    """Console-script entry point."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # `gpudoctor list | head` is not an error
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = 0
    sys.exit(code)
