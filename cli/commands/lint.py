"""`gpudoctor lint FILE|DIR...`: find the catalogue's failure patterns in training scripts before they run."""
from __future__ import annotations

import json
import textwrap

from gpudoctor import __version__
from gpudoctor.common import print_json
from gpudoctor.errors import UserError

HELP = "check training scripts for known distributed-training bugs (no GPU needed)"
DESCRIPTION = """\
Statically check training scripts (and torchrun launch scripts) for the
catalogue's patterns: a collective inside `if rank == 0:`, a sampler without
set_epoch, set_device(RANK), DDP without a DistributedSampler, and more.

Silence one line with a comment:  # gpudoctor: ignore[D21]

exit codes: 0 clean, 1 findings, 2 a file could not be read or parsed,
            3 a check failed (a gpudoctor bug; the other files are still linted)

examples:
  gpudoctor lint train.py
  gpudoctor lint src/ --select D21,D22
  gpudoctor lint . --format sarif > gpudoctor.sarif"""

SEVERITY_RANK = {"error": 0, "warning": 1, "note": 2}
STYLE = {"error": "fail", "warning": "yellow", "note": "cyan"}


def add_arguments(parser) -> None:
    parser.add_argument("paths", nargs="*", metavar="FILE|DIR", help="scripts or folders (folders are walked)")
    parser.add_argument("--format", choices=("human", "json", "sarif"), default=None,
                        help="output format (default human; --json is --format json)")
    parser.add_argument("--select", action="append", default=[], metavar="IDS",
                        help="only these entries or rule slugs, comma-separated (e.g. D21,D22)")
    parser.add_argument("--ignore", action="append", default=[], metavar="IDS",
                        help="skip these entries or rule slugs, comma-separated")
    parser.add_argument("--min-severity", choices=("error", "warning", "note"), default="note",
                        help="report findings at least this severe (default note: all)")
    parser.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                        help="worker processes for folders (default 2)")
    parser.add_argument("--cmd", metavar="CMD", help="also check this launch command (torchrun, accelerate launch, "
                        "deepspeed, python, behind srun or not)")
    parser.add_argument("--list-rules", action="store_true", help="list the checks and exit")


def run(args, out) -> int:
    from gpudoctor.engine.lint import lint_paths
    from gpudoctor.engine.lint.checks import ALL, BY_CODE, BY_SLUG

    if args.json and args.format not in (None, "json"):
        raise UserError(f"--json and --format {args.format} ask for two formats: give one")
    fmt = args.format or ("json" if args.json else "human")
    if args.list_rules:
        return _list_rules(out, fmt, ALL)
    if not args.paths and not args.cmd:
        raise UserError("give a script or a folder to lint, e.g. gpudoctor lint train.py")
    if args.cmd and fmt == "sarif":
        raise UserError("--cmd: a launch command is not a file SARIF can point at; use --format human or json")
    if args.jobs is not None and args.jobs < 1:
        raise UserError("--jobs must be at least 1")
    for option in ("select", "ignore"):
        for code in (c.strip() for v in getattr(args, option) for c in v.split(",") if c.strip()):
            if code.upper() not in BY_CODE and code not in BY_SLUG:
                known = ", ".join(BY_CODE)
                raise UserError(f"--{option}: no check named {code!r} (checks: {known})")
    if args.paths:
        result = lint_paths(args.paths, select=args.select, ignore=args.ignore, jobs=args.jobs, kb_dirs=args.kb)
    else:
        from gpudoctor.engine.lint.model import LintResult

        result = LintResult((), (), 0)
    if args.cmd:
        result = _with_command(result, args)
    limit = SEVERITY_RANK[args.min_severity]
    findings = [f for f in result.findings if SEVERITY_RANK[f.severity] <= limit]
    if fmt == "json":
        print_json(out, {"schema": "gpudoctor.lint/1", "files": result.files,
                         "findings": [f.to_dict() for f in findings],
                         "errors": [{"path": p, "message": m} for p, m in result.errors]})
    elif fmt == "sarif":
        from dataclasses import replace

        from gpudoctor.engine.lint.sarif import to_sarif

        out.write(json.dumps(to_sarif(replace(result, findings=tuple(findings)), __version__), indent=2))
    else:
        _human(out, findings, result, args.cmd)
    for path, message in result.errors:
        args.err.write(f"{args.err.style('gpudoctor: error:', 'fail')} {_safe(path)}: {message}")
    from gpudoctor.engine.lint.runner import INTERNAL

    if any(message.startswith(INTERNAL) for _, message in result.errors):
        return 3
    if result.errors:
        return 2
    return 1 if findings else 0


def _human(out, findings, result, command: str | None = None) -> None:
    from gpudoctor.common import fit
    from gpudoctor.engine.lint.command import COMMAND
    from gpudoctor.engine.lint.model import source_line

    sources: dict[str, list[str]] = {}
    width = min(out.width, 80)
    for f in findings:
        head = f"{_safe(f.path)}:{f.line}:{f.col + 1}: "
        label = out.style(f.entry_id, "id") + " " + out.style(f.severity, STYLE[f.severity])
        message = f.message
        if len(head) + len(f.entry_id) + len(f.severity) + len(f.rule) + 4 <= width:
            out.write(f"{head}{label} [{f.rule}]")
        else:  # a long path keeps the header short; the slug leads the message
            out.write(f"{head}{label}")
            message = f"[{f.rule}] {message}"
        for line in textwrap.wrap(message, width - 2, break_on_hyphens=False):
            out.write("  " + line)
        if f.path == COMMAND:
            out.write(out.style("    $ ", "dim") + fit(_safe(command), width - 6))
            out.write(out.style(f"  fix: gpudoctor fix {f.entry_id} --cmd '...'", "dim"))
            out.write()
            continue
        src = source_line(f.path, f.line, sources)
        if src is not None:
            gutter = f"{f.line:>5} | "
            text, caret = _window(src, f.col, width - len(gutter))
            out.write(out.style(gutter, "dim") + text)
            out.write(out.style(" " * 6 + "| ", "dim") + " " * caret + out.style("^", STYLE[f.severity]))
        fix = f"  fix: gpudoctor fix {f.entry_id}" if f.fix_id else f"  more: gpudoctor show {f.entry_id}"
        out.write(out.style(fix, "dim"))
        out.write()
    import os

    counts = {s: sum(1 for f in findings if f.severity == s) for s in SEVERITY_RANK}
    failed = len(result.errors)  # missing paths, and files that did not read or parse (counted in result.files)
    checked = result.files - sum(1 for path, _ in result.errors if os.path.isfile(path))
    files = f"{checked} file{'s' if checked != 1 else ''}" + (" and the launch command" if command else "")
    if command and not result.files:
        files = "the launch command"
    if failed:
        files += f" ({failed} could not be checked: see the error{'s' if failed != 1 else ''} below)"
    if findings:
        parts = ", ".join(f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n)
        summary = f"{len(findings)} finding{'s' if len(findings) != 1 else ''} ({parts}) in {files}"
    else:
        summary = f"no findings in {files}"
    for line in textwrap.wrap(summary, max(40, out.width), break_on_hyphens=False):
        out.write(line)


def _with_command(result, args):
    """The result with the launch command's findings added (engine/lint/command.py), the script it names read from
    here or from the files given."""
    from gpudoctor.engine.lint.command import script_reader, with_command

    return with_command(result, args.cmd, args.select, args.ignore, script_reader(args.paths))


def _window(line: str, col_bytes: int, width: int) -> tuple[str, int]:
    """The visible part of a source line and the caret's offset in it (ast columns are UTF-8 bytes)."""
    col = len(line.encode("utf-8")[:col_bytes].decode("utf-8", errors="ignore"))
    line = _safe(line.replace("\t", " "))
    indent = len(line) - len(line.lstrip())
    text, caret = line[indent:], max(0, col - indent)
    if caret > width - 10:  # keep the caret on screen
        shift = caret - (width // 2)
        text, caret = "…" + text[shift + 1:], caret - shift
    if len(text) > width:
        text = text[: width - 1] + "…"
    return text, caret


def _safe(text: str) -> str:
    return "".join(ch if ch.isprintable() or ch == " " else repr(ch)[1:-1] for ch in text)


def _list_rules(out, fmt, checks) -> int:
    if fmt != "human":
        print_json(out, [{"id": c.code, "rule": c.slug, "severity": c.severity, "summary": c.summary,
                          "languages": list(c.languages)} for c in checks])
        return 0
    for c in checks:
        out.write(f"{out.style(f'{c.code:<5}', 'id')} {c.slug:<34} {c.severity}")
        for line in textwrap.wrap(c.summary, min(out.width, 80) - 6, break_on_hyphens=False):
            out.write("      " + out.style(line, "dim"))
    return 0
