"""Plan an entry's fixes against the user's script, config and command: pure, reads files and never writes."""
from __future__ import annotations

import ast
import os

from gpudoctor.engine.fixes import env as envfix
from gpudoctor.engine.fixes.errors import UNSAFE, FixError, NotApplicable
from gpudoctor.engine.fixes.model import SAFETY_ORDER, FileEdit, FixPlan, PlannedFix, sha256_text

# what each kind of action needs from the user, for the note when it is missing
_NEEDS = {"command": "--cmd \"...\" (the launch command)", "patch": "--script train.py", "config": "--config FILE"}
BOM = "\ufeff"
_CONFIG_TYPES = {"ds-auto": (".json",), "ds-drop-global-batch": (".json",), "ds-keep-global-batch": (".json",),
                 "accelerate-multi-gpu": (".yaml", ".yml"),
                 "ds-zero-stage": (".json",), "accelerate-fsdp-strategy": (".yaml", ".yml")}


def read_text(path: str, what: str) -> str | None:
    """A file's text, None when it does not exist (an env file to create); FixError names the problem."""
    try:
        raw = open(path, "rb").read()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise FixError(f"{what} {path}: is a directory, not a file") from None
    except OSError as exc:
        raise FixError(f"{what} {path}: cannot read ({exc.strerror or exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FixError(f"{what} {path}: not UTF-8 text (byte {exc.start})") from None


MAX_SCRIPT_BYTES = 1 << 20  # a training script is tens of KB; libcst takes about 10 s and 0.5 GB per MB


def read_script(path: str) -> str:
    text = read_text(path, "--script")
    if text is None:
        raise FixError(f"--script {path}: no such file")
    if len(text) > MAX_SCRIPT_BYTES:
        raise FixError(f"--script {path}: {len(text) / (1 << 20):.1f} MB is more than a training script gpudoctor "
                       f"patches ({MAX_SCRIPT_BYTES >> 20} MB at most); `gpudoctor lint` reads files of any size")
    if "\x00" in text:
        raise FixError(f"--script {path}: not Python (it holds NUL bytes: a binary file or a log?)")
    if path.endswith(".ipynb"):  # its JSON would parse as one Python expression and be "patched" as such
        raise FixError(f"--script {path}: a Jupyter notebook; fix edits scripts: export it (jupyter nbconvert --to "
                       "script) and give the .py (`gpudoctor lint` reads the notebook's cells as they are)")
    try:
        ast.parse(text.removeprefix(BOM), filename=path)
    except (SyntaxError, ValueError) as exc:
        where = f"line {exc.lineno}: " if getattr(exc, "lineno", None) else ""
        raise FixError(f"--script {path}: not Python ({where}{getattr(exc, 'msg', None) or exc})") from None
    return text


def plan_fix(catalog, entry_id: str, **kwargs) -> FixPlan:
    """Every fix action of the entry that the given inputs allow, with diffs; notes say what is missing.

    Keywords: script, config, cmd, facts, env_file; `only`: None, or the ids of the actions to plan (those a log's
    evidence calls for, none where it calls for a step that no action carries out; or --only); the others get a note
    saying `only_why`. A file too deeply nested for the code rewriter (an expression of hundreds of terms) is a
    FixError naming it, as lint reports it, never a crash."""
    try:
        return _plan_fix(catalog, entry_id, **kwargs)
    except RecursionError:
        what = " ".join(f"{flag} {kwargs[key]}" for key, flag in (("script", "--script"), ("config", "--config"))
                        if kwargs.get(key))
        raise FixError(f"{what or 'the input'}: nested too deeply to be rewritten (an expression of hundreds of "
                       "terms); nothing was planned") from None


def _plan_fix(catalog, entry_id: str, *, script=None, config=None, cmd=None, facts=None, env_file=None,
              only=None, only_why: str = "not in --only") -> FixPlan:
    entry = catalog.get(entry_id)
    if entry is None:
        raise FixError(f"unknown entry {entry_id!r} (see gpudoctor list)")
    known = [a.id for a in entry.fix_actions]
    unknown = [a for a in only or () if a not in known]
    if unknown:
        raise FixError(f"{entry.id} has no fix action {unknown[0]!r}"
                       + (f" (its fix actions: {', '.join(known)})" if known else " (it has none)"))
    facts = dict(facts or {})
    from_log = not cmd and bool(facts.get("cmd"))  # the command the log echoed, not one the user typed
    cmd = cmd or facts.get("cmd")
    if config:
        facts.setdefault("accelerate_config" if config.endswith((".yaml", ".yml")) else "ds_config", config)
    texts: dict[str, str | None] = {}
    if script:
        texts[script] = read_script(script)
    if config:
        texts[config] = read_text(config, "--config")
        if texts[config] is None:
            raise FixError(f"--config {config}: no such file")
    if env_file:
        texts[env_file] = read_text(env_file, "--env-file")
        folder = os.path.dirname(os.path.abspath(env_file))
        if texts[env_file] is None and not os.path.isdir(folder):  # a new file needs its folder
            raise FixError(f"--env-file {env_file}: the folder {folder} does not exist")
    notes: list[str] = []
    fixes: list[PlannedFix] = []
    if not entry.fix_actions:
        notes.append(f"{entry.id} has no executable fix; its steps are in `gpudoctor show {entry.id}`")
    actions = sorted(entry.fix_actions, key=lambda a: SAFETY_ORDER.index(a.safety))
    if only is not None:
        notes += [f"{a.id}: not planned, {only_why}" for a in actions if a.id not in only]
        actions = [a for a in actions if a.id in only]
    for action in actions:
        merged = {k: v for k, v in action.param("defaults", ())}
        defaulted = set(merged)
        merged.update({k: v for k, v in facts.items() if v not in (None, "")})
        defaulted -= {k for k, v in facts.items() if v not in (None, "")}
        label = f"{action.id}"
        fix_notes: list[str] = []
        edits: list[FileEdit] = []
        commands: tuple[str, ...] = ()
        env: tuple = ()
        try:
            if action.kind == "env":
                env, missing = envfix.env_values(action, merged)
                if missing:
                    notes.append(f"{label}: give --param {missing[0]}=... to fill it in")
                    continue
                used = {k for k in defaulted if any("{" + k + "}" in str(v) for _, v in action.param("env", ()))}
                fix_notes += [f"{k}={merged[k]} is a default: give --param {k}=... if yours differs" for k in sorted(used)]
                if env_file:
                    edit = envfix.env_file_edit(env_file, texts[env_file], env)
                    if edit is not None:
                        edits.append(edit)
            elif action.kind == "command":
                if not cmd:
                    notes.append(f"{label}: give {_NEEDS['command']} to get it rewritten")
                    continue
                from gpudoctor.engine.fixes.launch import rewrite

                try:
                    new, more = rewrite(cmd, action.param("rewrite"), merged)
                except NotApplicable:
                    raise
                except FixError as exc:  # the log's command, unlike one typed with --cmd, is no usage error
                    if not from_log:
                        raise
                    why = str(exc)
                    if why.startswith("--cmd: "):  # parse_launch could not read the line the log echoed
                        why = (f"the launch command in the log could not be read ({why.removeprefix('--cmd: ')}); "
                               f"give {_NEEDS['command']} to get it rewritten")
                    notes.append(f"{label}: {why}")
                    continue
                commands, fix_notes = (new,), fix_notes + more
            elif action.kind == "patch":
                if not script:
                    notes.append(f"{label}: give {_NEEDS['patch']} to get a diff")
                    continue
                from gpudoctor.engine.fixes.patches import get

                after, more = _keep_bom(get(action.param("patch")), texts[script], script, merged)
                edits.append(_edit(script, texts[script], after))
                fix_notes += more
            elif action.kind == "config":
                name = action.param("config")
                if not config:
                    notes.append(f"{label}: give {_NEEDS['config']} ({'/'.join(_CONFIG_TYPES[name])}) to get a diff")
                    continue
                if not config.endswith(_CONFIG_TYPES[name]):
                    notes.append(f"{label}: applies to a {'/'.join(_CONFIG_TYPES[name])} file, not {os.path.basename(config)}")
                    continue
                from gpudoctor.engine.fixes.config import CONFIG_EDITS

                after, more = _keep_bom(CONFIG_EDITS[name], texts[config], config, merged)
                edits.append(_edit(config, texts[config], after))
                fix_notes += more
        except NotApplicable as exc:
            notes.append(f"{label}: {exc}")
            continue
        for edit in edits:
            texts[edit.path] = edit.after  # a later fix of the same file builds on this one
        safety, why = action.safety, str(action.param("why") or "")
        downgrades = [n[len(UNSAFE):] for n in fix_notes if n.startswith(UNSAFE)]
        if downgrades and safety == "safe":  # this file's case of a safe fix is not: it needs --unsafe
            safety, why = "unsafe", "; ".join(downgrades)
        fixes.append(PlannedFix(
            entry_id=entry.id, action_id=action.id, kind=action.kind, safety=safety, title=action.title,
            why=why, edits=tuple(edits), commands=commands, env=env,
            notes=tuple(n for n in fix_notes if not n.startswith(UNSAFE))))
    return FixPlan(entry_id=entry.id, fixes=tuple(fixes), notes=tuple(notes))


def _keep_bom(transform, text: str, path: str, facts: dict):
    """Run a transform on the text without its byte-order mark, and put the mark back."""
    bom = BOM if text.startswith(BOM) else ""
    after, notes = transform(text[len(bom):], path, facts)
    return bom + after, notes


def _edit(path: str, before: str, after: str) -> FileEdit:
    if after == before:
        raise NotApplicable(f"{path}: already fixed")
    return FileEdit(path=path, before_sha256=sha256_text(before), before=before, after=after)
