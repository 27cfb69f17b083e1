"""`gpudoctor diagnose`: name the catalogue entries that explain a failed run's logs, with evidence."""
from __future__ import annotations

import sys

from gpudoctor.common import load, print_json
from gpudoctor.errors import EXIT_NOTHING, EXIT_OK, UserError

HELP = "name the cause of a failed run from its logs"
DESCRIPTION = """\
Read logs (files, per-rank directories, globs, .gz .xz .zst .bz2 by content,
tar and zip archives file by file, flight-recorder dumps, or stdin, compressed
or not) and name the known failures that explain them, best first, with the
lines that betray each, the fix, and the probe that would confirm it. When no
signature fires but the log shows a failure (a traceback, a NCCL WARN, a
timeout, a killed rank), it lists the entries whose words the failure lines
share as possible causes, kept apart from confident findings ("No known cause
matched. Possibly:"). A log with no failure line at all gets, at most, fainter
guesses from its content (the launch, the config it echoes, where it stopped),
marked as such. The training script (--script) and the launch command (--cmd)
are checked too: a possible cause they show becomes a confident one.

examples:
  gpudoctor diagnose < nccl.log
  gpudoctor diagnose logs/                # torchrun --log-dir, NCCL_DEBUG_FILE
  gpudoctor diagnose rank*.log --json
  gpudoctor diagnose job.log.gz --format markdown > report.md
  gpudoctor diagnose rank3.log --script train.py --cmd "torchrun ..."

exit codes: 0 a cause matched, 1 only possible causes or nothing known,
2 usage or input error, 3 internal error (a bug: the message names the report
file)"""

PROGRESS_MIN_BYTES = 32 << 20


def add_arguments(parser) -> None:
    parser.add_argument("paths", nargs="*", metavar="PATH", help="log files or directories; - or nothing reads stdin")
    parser.add_argument("--format", "-f", choices=("text", "json", "markdown"), default=None,
                        help="output format (default text; --json is the same as --format json)")
    parser.add_argument("--engine", choices=("auto", "hyperscan", "re2", "python"), default="auto",
                        help="multi-pattern engine (default: the fastest installed; every engine gives the same findings)")
    parser.add_argument("--no-hyperscan", action="store_true", help="the same as --engine python")
    parser.add_argument("--top", type=int, default=5, metavar="N", help="show at most N confident findings, and N possible causes (default 5)")
    parser.add_argument("--probe", action="store_true",
                        help="also run, on this machine, the live probes of the top findings and fold in their verdicts "
                             "(a possible cause a probe confirms becomes a confident one)")
    parser.add_argument("--tui", action="store_true", help="open the results in the interactive session")
    parser.add_argument("--script", metavar="FILE", help="check this training script too: a cause the log points at and the script shows becomes a "
                             "confident one; end with the top finding's fix as a diff against it")
    parser.add_argument("--cmd", metavar="CMD", help="the launch command, checked the same way (torchrun --standalone "
                        "across nodes confirms D2), and rewritten for the top finding")


class _Progress:
    """A one-line byte counter on stderr, only on a terminal and only for big inputs."""

    def __init__(self, err, total: int | None):
        self.err, self.total, self.done, self.shown = err, total, 0, False

    def __call__(self, n: int) -> None:
        self.done += n
        if self.total:
            pct = min(100, 100 * self.done // self.total)
            bar = "#" * (pct // 4)
            line = f"reading {self.done / 2**20:,.0f}/{self.total / 2**20:,.0f} MiB [{bar:<25}] {pct:3d}%"
        else:
            line = f"reading {self.done / 2**20:,.0f} MiB"
        self.err.stream.write("\r" + line)
        self.err.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.err.stream.write("\r" + " " * 60 + "\r")
            self.err.stream.flush()


def _stdin():
    """The binary standard input, or None when the process was started with it closed."""
    stream = sys.stdin
    return None if stream is None else getattr(stream, "buffer", stream)


def _warn(err, message: str) -> None:
    from gpudoctor.term import sanitize

    err.write(f"{err.style('gpudoctor: warning:', 'yellow')} {sanitize(message)}")


PROBED_FINDINGS = 3  # the probes of this many top findings run with --probe


def _run_probes(findings, err) -> dict:
    """Run each distinct probe of the top findings once; entry id -> [Result] that speak to it."""
    from gpudoctor.probes import registry, runner

    wanted: list[str] = []
    for finding in findings[:PROBED_FINDINGS]:
        wanted += [p for p in finding.probes if p not in wanted]
    probes = [registry.get(p) for p in wanted if registry.get(p) is not None]
    if not probes:
        return {}
    if err.stream.isatty():
        err.stream.write(f"running {len(probes)} probe(s): {', '.join(p.id for p in probes)}\n")
    results = runner.run_probes(probes, _options_from_evidence(findings))
    by_entry: dict[str, list] = {}
    for probe, res in zip(probes, results):
        for finding in findings:
            if probe.id in finding.probes:
                by_entry.setdefault(finding.id, []).append(res)
    return by_entry


def _options_from_evidence(findings) -> dict:
    """Probe options the log itself gives away, e.g. the port a failed bind named."""
    import re

    options: dict = {}
    for finding in findings:
        for ev in finding.evidence:
            m = re.search(r"\bport[:= ]+(\d{2,5})\b", ev.text)
            if m and "port" not in options and 0 < int(m.group(1)) < 65536:
                options["port"] = int(m.group(1))
    return options


def run(args, out) -> int:
    if args.tui:
        from gpudoctor.commands.tui import launch
        return launch(args, args.paths or ["-"], script=getattr(args, "script", None))
    from gpudoctor.engine.diagnose import diagnose
    from gpudoctor.engine.sources import resolve, stdin_is_terminal

    if args.json and args.format not in (None, "json"):
        raise UserError(f"--json and --format {args.format} ask for two formats: give one")
    fmt = "json" if args.json else (args.format or "text")
    stdin = getattr(args, "stdin", None) or _stdin()
    paths = args.paths or ["-"]
    if "-" in paths and stdin is None:
        raise UserError("no input: standard input is closed; give log files or a directory")
    if paths == ["-"] and stdin_is_terminal(stdin):
        raise UserError("no input: give log files or a directory, or pipe a log in "
                        "(gpudoctor diagnose < nccl.log)")
    if args.top < 1:
        raise UserError("--top must be at least 1")
    names = {}
    if "-" in paths and not stdin_is_terminal(stdin):  # a tar or zip piped in is read member by member
        from gpudoctor.engine.archives import spool_stdin

        stdin, spooled = spool_stdin(stdin)
        if spooled is not None:
            paths = [str(spooled) if p == "-" else p for p in paths]
            names = {str(spooled): "<stdin>"}
    problems: list[str] = []
    sources = resolve(paths, problems, names)
    if not sources:  # one problem is the error itself; several are each named before it
        if len(problems) > 1:
            for problem in problems:
                _warn(args.err, problem)
        raise UserError(problems[0] if len(problems) == 1 else f"none of the {len(problems)} inputs could be read")
    for problem in problems:  # named here; the inputs that can be read still are
        _warn(args.err, problem)
    catalog = load(args)
    total = sum(s.size or 0 for s in sources) or None
    progress = None
    if args.err.stream.isatty() and (total is None or total >= PROGRESS_MIN_BYTES):
        progress = _Progress(args.err, total)
    from gpudoctor.engine.sources import InputError

    try:
        engine = "python" if args.no_hyperscan else (None if args.engine == "auto" else args.engine)
        result = diagnose(catalog, sources, stdin=stdin, engine=engine, progress=progress)
    except InputError as exc:
        raise UserError(str(exc)) from None
    finally:
        if progress is not None:
            progress.close()
    for summary in result.inputs:
        if summary.problem:
            _warn(args.err, summary.problem)
    logs = [i for i in result.inputs if i.kind == "log"]
    if all(i.bytes == 0 for i in logs) and not any(i.kind == "flight" for i in result.inputs):
        if logs and all(i.problem for i in logs):
            raise UserError("no input could be read" if len(logs) > 1 else "no input could be read: " + logs[0].problem)
        raise UserError("no input: " + ("stdin was empty" if paths == ["-"] else "every file was empty"))
    result = result.top(args.top)  # N confident findings, then at most N possible causes
    witnesses = []
    if args.script or args.cmd:  # only then: lint and the command parser stay out of a plain run's start-up
        from gpudoctor.commands.fix import witnesses_of

        witnesses = witnesses_of(args)
    if args.probe and result.findings:  # a probe that confirms a possible cause makes it a confident one
        results = _run_probes(result.findings, args.err)
        result = result.with_probe_results(results)
        from gpudoctor.engine.corroborate import from_probe_results

        witnesses += from_probe_results(results)
    if witnesses:
        from gpudoctor.engine.corroborate import corroborate

        result = corroborate(result, witnesses, catalog).top(args.top)
    matches = [f for f in result.findings if f.tier == "match"]
    fix_plan = None
    if args.script or args.cmd:  # the top finding's fix, filled with what the log gave away
        from gpudoctor.commands.fix import emit_for_diagnosis, plan_for_diagnosis

        fix_plan = plan_for_diagnosis(result, args, catalog)
    if fmt == "json":
        from gpudoctor.report import to_json

        payload = to_json(result)
        if fix_plan is not None:
            emit_for_diagnosis(fix_plan, fmt, out, payload)
        payload.update(getattr(args, "json_extra", None) or {})  # what a command that diagnoses for you adds
        print_json(out, payload)
    elif fmt == "markdown":
        from gpudoctor.report import render_markdown

        out.stream.write(render_markdown(result))
        if fix_plan is not None:
            emit_for_diagnosis(fix_plan, fmt, out)
    else:
        from gpudoctor.report import render_text

        render_text(result, out, catalog, witnessed=bool(args.script or args.cmd or args.probe))
        if fix_plan is not None:
            emit_for_diagnosis(fix_plan, fmt, out)
    return EXIT_OK if matches else EXIT_NOTHING
