"""`gpudoctor fix`: an entry's fix as a plan and a diff (a dry run); apply it with --apply, undo with --undo."""
from __future__ import annotations

import contextlib
import shlex
import sys
import textwrap

from gpudoctor.common import load, print_json
from gpudoctor.errors import EXIT_NOTHING, EXIT_OK, UserError

HELP = "show an entry's fix as a diff; apply it or undo it"
DESCRIPTION = """\
Show the fix of a catalogue entry as a plan: the diff against your training
script or config, the rewritten launch command, the variables to export.
Nothing is written unless you pass --apply, which writes the safe fixes (add
--unsafe for the unsafe ones; display-only fixes are only shown). Before
writing, every file is checked against the preview; a copy is kept and
`gpudoctor fix --undo` puts the files back byte for byte.

examples:
  gpudoctor fix D22 --script train.py          # the diff, nothing written
  gpudoctor fix D22 --script train.py --apply
  gpudoctor fix --undo
  gpudoctor fix --forget                       # past one that cannot be undone
  gpudoctor fix D4 --cmd "torchrun --master-port=29500 train.py"
  gpudoctor fix MN2 --param interface=ens5 --env-file cluster.env --apply
  gpudoctor fix --log logs/ --script train.py  # the log's top match

safety: --apply writes safe fixes; unsafe ones change behaviour (each says
why) and also need --unsafe; display-only ones are for you to adapt by hand.
exit codes: 0 a plan shown, applied or undone; 1 nothing to fix with these
inputs; 2 usage or input error (no such file, not Python, a file changed
since the preview, a fix that would leave a file that does not parse)
environment: GPUDOCTOR_STATE_DIR holds the undo journal
(default ~/.local/state/gpudoctor)"""


NOT_CALLED_FOR = "the log's evidence does not call for it"  # why a fix of the entry was left out of the plan


def add_arguments(parser) -> None:
    parser.add_argument("id", nargs="?", metavar="ID", help="catalogue entry (D22, mn3, ...); omit with --log")
    parser.add_argument("--script", metavar="FILE", help="training script to patch")
    parser.add_argument("--config", metavar="FILE", help="ds_config.json or Accelerate YAML to patch")
    parser.add_argument("--cmd", metavar="CMD", help='launch command to rewrite, e.g. "python train.py --lr 3e-4"')
    parser.add_argument("--log", metavar="PATH", action="append", default=[],
                        help="log(s) to take facts from (port, interface, world size, command); "
                             "without ID, fix their top finding")
    parser.add_argument("--param", metavar="KEY=VALUE", action="append", default=[],
                        help="fill a fact by hand: port, interface, nproc, nnodes, world_size, master_addr, "
                             "timeout_minutes, checkpoint, ... (repeatable)")
    parser.add_argument("--probe", action="store_true",
                        help="run the nic probe on this machine and name its data interface (MN2)")
    parser.add_argument("--only", metavar="ACTION[,ACTION]",
                        help="plan only these fix actions of the entry (with --log, the ones its evidence calls for "
                             "are the default)")
    parser.add_argument("--env-file", metavar="FILE", help="also write env fixes as export lines into FILE")
    parser.add_argument("--apply", action="store_true", help="write the safe fixes (checked, backed up, undoable)")
    parser.add_argument("--unsafe", action="store_true", help="with --apply, also write the unsafe fixes")
    parser.add_argument("--undo", action="store_true", help="undo the last applied fix, byte for byte")
    parser.add_argument("--forget", action="store_true",
                        help="drop the last applied fix from the undo journal, files untouched (for one that can no "
                             "longer be undone: --undo then reaches the fix before it)")


def parse_params(items) -> dict:
    from gpudoctor.engine.fixes import FixError
    from gpudoctor.engine.fixes.facts import parse_params as parse

    try:
        return parse(items)
    except FixError as exc:
        raise UserError(str(exc)) from None


def _diagnose_logs(paths, catalog, stdin=None, err=None):
    from gpudoctor.engine.diagnose import diagnose
    from gpudoctor.engine.sources import InputError, resolve_some

    try:
        sources, left_out = resolve_some(paths)
        if err is not None:
            from gpudoctor.commands.diagnose import _warn

            for problem in left_out:  # a train.py beside the logs: named, as diagnose names it
                _warn(err, problem)
        return diagnose(catalog, sources, stdin=stdin)
    except InputError as exc:
        raise UserError(str(exc)) from None


@contextlib.contextmanager
def _stdin_as_file(paths):
    """The --log paths with `-` replaced by a temporary copy of standard input (removed afterwards): the diagnosis
    and the facts read from the log's head both need it, and a pipe can be read once."""
    if "-" not in paths:
        yield paths
        return
    import shutil
    import tempfile

    with tempfile.NamedTemporaryFile(prefix="gpudoctor-stdin-", suffix=".log") as copy:
        stream = sys.stdin
        if stream is None:
            raise UserError("--log -: standard input is closed")
        shutil.copyfileobj(getattr(stream, "buffer", stream), copy)
        copy.flush()
        yield [copy.name if p == "-" else p for p in paths]


def witnesses_of(args) -> list:
    """The script's and the launch command's witnesses (engine/corroborate.py); a script that could not be checked
    is named on stderr, a folder or a command that cannot be parsed is a usage error."""
    import os

    from gpudoctor.engine.corroborate import gather
    from gpudoctor.engine.fixes import FixError

    script, cmd = getattr(args, "script", None), getattr(args, "cmd", None)
    if script and os.path.isdir(script):  # lint would walk it; a fix needs one file
        raise UserError(f"--script {script}: is a directory, not a file")
    try:
        witnesses, errors = gather(script, cmd)
    except FixError as exc:
        raise UserError(str(exc)) from None
    from gpudoctor.term import sanitize

    for path, message in errors:
        args.err.write(f"{args.err.style('gpudoctor: warning:', 'yellow')} "
                       f"{sanitize(f'{path}: {message}')} (the script was not checked)")
    return witnesses


def _probe_facts() -> dict:
    """Facts a live probe on this machine gives: the fast network interface (nic)."""
    from gpudoctor.engine.fixes.facts import interface_from_nic
    from gpudoctor.probes import registry, runner

    probe = registry.get("nic")
    if probe is None:
        return {}
    [result] = runner.run_probes([probe], {})
    interface = interface_from_nic(dict(result.figures))
    return {"interface": interface} if interface else {}


def run(args, out) -> int:
    from gpudoctor.engine.fixes import FixError, plan_fix, plan_to_dict
    from gpudoctor.engine.fixes.apply import apply_plan, forget_last, undo_last

    if args.forget or args.undo:
        if args.id or args.apply or (args.forget and args.undo):
            raise UserError("--undo and --forget take no entry id, no --apply and not each other")
        from gpudoctor.engine.fixes.errors import NothingRecorded

        try:
            res = forget_last() if args.forget else undo_last()
        except NothingRecorded as exc:  # not a usage error: there is simply nothing to do (exit 1)
            if args.json:
                print_json(out, {"schema": "gpudoctor.fixforget/1" if args.forget else "gpudoctor.fixundo/1",
                                 "restored": [], "journal": None, "message": str(exc)})
            else:
                args.err.write(f"gpudoctor: {exc}\n")
            return EXIT_NOTHING
        except FixError as exc:
            raise UserError(str(exc)) from None
        if args.forget:
            if args.json:
                print_json(out, {"schema": "gpudoctor.fixforget/1", "journal": res})
            else:
                out.write(f"forgot the last applied fix; its backups stay in {res}")
        elif args.json:
            print_json(out, {"schema": "gpudoctor.fixundo/1", "restored": list(res.restored), "journal": res.journal})
        else:
            for path in res.restored:
                out.write(f"{out.style('restored', 'ok')} {path}")
        return EXIT_OK
    if args.unsafe and not args.apply:
        raise UserError("--unsafe only makes sense with --apply")
    catalog = load(args)
    facts = {}
    entry_id = args.id
    if args.log:
        from gpudoctor.engine.fixes import facts_from_diagnosis

        from gpudoctor.engine.corroborate import corroborate

        with _stdin_as_file(args.log) as logs:  # `--log -`: a piped log, read as diagnose reads it
            diagnosis = corroborate(_diagnose_logs(logs, catalog, err=args.err), witnesses_of(args), catalog)
            facts = facts_from_diagnosis(diagnosis, logs=logs)
        if entry_id is None:
            matches = [f for f in diagnosis.findings if f.tier == "match"]
            if not matches:
                guesses = [f.id for f in diagnosis.findings]
                args.err.write("gpudoctor: nothing known matched in the log, so there is no fix to show" +
                               (f" (possible causes: {', '.join(guesses[:3])}; give one as ID to see its fix)"
                                if guesses else ""))
                return EXIT_NOTHING
            entry_id = matches[0].id
    if entry_id is None:
        raise UserError("give an entry id (gpudoctor fix D22 --script train.py), or --log to fix its top finding")
    if catalog.get(entry_id) is None:
        raise UserError(f"unknown entry {entry_id!r} (see gpudoctor list)")
    entry_id = catalog.get(entry_id).id
    pointed = None
    if args.log:
        pointed = next((f.pointed for f in diagnosis.findings if f.id == entry_id), None)
    only, only_why = None, "not in --only"
    if args.only is not None:
        only = tuple(a.strip() for a in args.only.split(",") if a.strip())
        if not only:
            raise UserError("--only: give one or more fix action ids, e.g. --only engine-backward")
    elif pointed is not None:
        only = pointed.actions
        only_why = f"{NOT_CALLED_FOR} (gpudoctor fix {entry_id} plans every fix)"
    if args.probe:
        facts.update(_probe_facts())
    facts.update(parse_params(args.param))
    try:
        plan = plan_fix(catalog, entry_id, script=args.script, config=args.config, cmd=args.cmd, facts=facts,
                        env_file=args.env_file, only=only, only_why=only_why)
        result = apply_plan(plan, unsafe=args.unsafe) if args.apply else None
    except FixError as exc:
        raise UserError(str(exc)) from None
    if args.json:
        payload = plan_to_dict(plan)
        payload["facts"] = {k: v for k, v in facts.items()}
        if pointed is not None and pointed.step:
            from gpudoctor.report import pointed_json

            payload["fix_step"] = pointed_json(pointed)["fix_step"]
        if result is not None:
            payload["applied"] = {"written": list(result.written), "unchanged": list(result.unchanged),
                                  "skipped": [{"action": a, "why": w} for a, w in result.skipped],
                                  "journal": result.journal}
        print_json(out, payload)
    else:
        render_plan(plan, out, catalog, pointed)
        _render_outcome(plan, result, out)
    return EXIT_OK if plan.fixes else EXIT_NOTHING


def _wrap(out, text: str, indent: str = "  ") -> None:
    for line in textwrap.wrap(text, width=max(40, out.width), initial_indent=indent,
                              subsequent_indent=indent + "  ", break_long_words=False,
                              break_on_hyphens=False) or [""]:
        out.write(line)


def _head(out, prefix: str, styled: str, rest: str) -> None:
    """A wrapped line whose first words are styled (styling after wrapping keeps the width right)."""
    lines = textwrap.wrap(prefix + rest, width=max(40, out.width), subsequent_indent="  ", break_on_hyphens=False)
    if lines and lines[0].startswith(prefix):
        lines[0] = styled + lines[0][len(prefix):]
    for line in lines:
        out.write(line)


def render_diff(diff: str, out) -> None:
    from gpudoctor.term import sanitize

    for line in diff.splitlines():
        shown = sanitize(line)
        if line.startswith(("+++", "---")):
            out.write(out.style(shown, "bold"))
        elif line.startswith("@@"):
            out.write(out.style(shown, "cyan"))
        elif line.startswith("+"):
            out.write(out.style(shown, "green"))
        elif line.startswith("-"):
            out.write(out.style(shown, "red"))
        else:
            out.write(shown)


_SAFETY_STYLE = {"safe": "ok", "unsafe": "yellow", "display-only": "dim"}


def render_plan(plan, out, catalog=None, pointed=None) -> None:
    """The plan for a terminal: the step the log calls for, then each fix with its safety, why, notes, command,
    exports and diff."""
    from gpudoctor.engine.fixes.env import export_lines
    from gpudoctor.term import sanitize

    entry = catalog.get(plan.entry_id) if catalog is not None else None
    head = f"Fix for {plan.entry_id}"
    _head(out, head, out.style(head, "heading"), f": {entry.title}" if entry else "")
    if pointed is not None and pointed.step:
        _wrap(out, f"what this log calls for (step {pointed.step} of {pointed.steps}): {pointed.text}", indent="")
        for line in (pointed.code or "").splitlines():
            out.write("    " + out.style(line, "code") if line.strip() else "")
    for fix in plan.fixes:
        out.write()
        tag = out.style(f"[{fix.safety}]", _SAFETY_STYLE.get(fix.safety, "bold"))
        _head(out, f"[{fix.safety}] {fix.action_id}", f"{tag} {out.style(fix.action_id, 'id')}", f": {fix.title}")
        if fix.why:
            _wrap(out, f"why {fix.safety}: {fix.why}")
        for note in fix.notes:
            _wrap(out, f"- {sanitize(note)}")
        if fix.commands:
            out.write("  run:")
            for command in fix.commands:
                out.write("    " + out.style(sanitize(command), "code"))
        if fix.env:
            out.write("  export (on every node, before the launch):")
            for line in export_lines(fix.env):
                out.write("    " + out.style(sanitize(line), "code"))
        if fix.edits:
            render_diff(fix.diff(), out)
    if plan.notes:
        out.write()
        for note in plan.notes:
            _wrap(out, f"note: {sanitize(note)}", indent="")


def _render_outcome(plan, result, out) -> None:
    out.write()
    if not plan.fixes:
        out.write("nothing to fix with these inputs")
        return
    if result is None:
        if any(f.edits for f in plan.fixes):
            extra = " (--unsafe adds the unsafe ones)" if any(f.safety == "unsafe" and f.edits for f in plan.fixes) else ""
            for line in textwrap.wrap(f"dry run: nothing written; --apply writes the safe fixes{extra}",
                                      max(40, out.width), break_on_hyphens=False):
                out.write(line)
        return
    for path in result.written:
        out.write(f"{out.style('wrote', 'ok')} {path}")
    for path in result.unchanged:
        out.write(f"unchanged {path} (already fixed)")
    for action, why in result.skipped:
        out.write(f"not applied {action}: {why}")
    if result.written:
        out.write("undo with: gpudoctor fix --undo")
    elif not result.unchanged:
        out.write("nothing written: no safe fix with a file edit" + (" (see --unsafe)" if result.skipped else ""))


def plan_for_diagnosis(result, args, catalog):
    """The fix for a diagnosis's top finding, filled with what its logs gave away (for diagnose --script/--cmd)."""
    from gpudoctor.engine.fixes import FixError, facts_from_diagnosis, plan_fix

    matches = [f for f in result.findings if f.tier == "match"]
    if not matches:  # a possible cause is a guess: no fix is planned from it
        return None
    facts = facts_from_diagnosis(result, logs=[p for p in getattr(args, "paths", []) if p != "-"])
    top = matches[0]
    only = top.pointed.actions if top.pointed is not None else None
    try:
        return plan_fix(catalog, top.id, script=args.script, cmd=args.cmd, facts=facts, only=only,
                        only_why=NOT_CALLED_FOR)
    except FixError as exc:  # a script only a newer Python parses: the log's diagnosis stands, without the diff
        from gpudoctor.commands.diagnose import _warn

        _warn(args.err, f"no fix planned for {top.id}: {exc}")
        return None


def emit_for_diagnosis(plan, fmt: str, out, payload=None) -> None:
    """Append the plan to diagnose's output: a section in text or Markdown, a "fix" key in JSON."""
    if plan is None:
        return
    if fmt == "json":
        from gpudoctor.engine.fixes import plan_to_dict

        payload["fix"] = plan_to_dict(plan)
    elif fmt == "markdown":
        out.stream.write(f"\n## Fix for {plan.entry_id}\n\n")
        for fix in plan.fixes:
            out.stream.write(f"- **{fix.action_id}** ({fix.safety}): {fix.title}\n")
            for command in fix.commands:
                out.stream.write(f"\n```bash\n{command}\n```\n")
            if fix.edits:
                out.stream.write(f"\n```diff\n{fix.diff()}```\n")
        for note in plan.notes:
            out.stream.write(f"- note: {note}\n")
    else:
        out.write()
        render_plan(plan, out)
        if any(f.edits for f in plan.fixes):
            out.write()
            only = sorted({f.action_id for f in plan.fixes if f.edits})
            skipped = any(NOT_CALLED_FOR in n for n in plan.notes)
            scripts = sorted({e.path for f in plan.fixes for e in f.edits if e.path.endswith(".py")})
            script = shlex.quote(scripts[0]) if len(scripts) == 1 else "FILE"
            out.write(f"apply with: gpudoctor fix {plan.entry_id} --script {script}"
                      f"{' --only ' + ','.join(only) if skipped else ''} --apply")
