"""Fold a second, independent witness into a diagnosis: the user's training script (lint) or their machine (probes).

A log alone often shows only the symptom (a timeout, an invalid ordinal, a hang); the script shows the bug that
produces it. When both point at the same entry, the guess is no longer a guess:
- a possible cause that the script or a probe confirms becomes a confident match, if the log leans on it at least
  as much as on any other guess;
- a bug the script shows whose symptom the log matched (D21's collective in a rank-0 branch beside MN3's watchdog
  timeout: D21 explains MN3) becomes a confident match that explains the symptom;
- a confident match the script also shows gains a little and cites the script's line;
- a bug the script shows that the log gives no sign of is only noted: it may be real, but not this failure.
"""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence, Finding
from gpudoctor.kb.record import record, replace

CONFIRMED_MIN = 0.7  # a possible cause that a second witness confirms scores at least this
MATCH_GAIN = 0.1  # a confident finding the second witness also shows moves up by this much
EXPLAIN_MARGIN = 0.01  # a confirmed cause ranks this far above the symptom it explains
GUESS_TIE = 0.005  # possible causes this close to the best guess are tied with it (scores are shown to 2 places)
_NAMES = {"script": "the script", "command": "the launch command", "probe": "a probe"}
# rules whose finding is the cause itself, not a symptom another bug could explain: one rank's step ran as long as
# the timeout (MN3), so the others' wait was that step's, whatever else the script may get wrong
_OWN_CAUSE = frozenset({"rule:step-as-long-as-timeout"})


def _own_cause(f: Finding) -> bool:
    return bool(_OWN_CAUSE.intersection(f.signatures))


# what each second witness can speak for, kept here so that a plain diagnosis can say so without loading lint:
# the entries `gpudoctor lint` checks a script for (engine/lint/checks) and those it checks a launch command for
# (engine/lint/command.py); tests/engine/test_corroborate.py holds both to the checks themselves
SCRIPT_CHECKS = frozenset({"D1", "D2", "D3", "D4", "D8", "D9", "D10", "D12", "D14", "D15", "D18", "D20", "D21", "D22", "D23", "D26", "D27", "MN3", "MN5",
                           "P1", "P2", "P3", "P4", "P5", "P6"})
COMMAND_CHECKS = frozenset({"D1", "D2", "D5", "D6", "D27"})


def confirmable(findings, catalog) -> dict[str, list[str]]:
    """For a diagnosis of guesses: the entries among them (or that would explain one of them) that the script, the
    launch command or a probe could confirm, by witness ("script", "command", "probe"); empty lists left out."""
    guessed = [f.id for f in findings if f.tier == "possible"]
    entries = {e.id: e for e in catalog}
    behind = [e.id for e in entries.values() if set(e.explains) & set(guessed) and e.id not in guessed]
    out = {
        "script": [i for i in guessed + behind if i in SCRIPT_CHECKS],
        "command": [i for i in guessed + behind if i in COMMAND_CHECKS],
        "probe": [f.id for f in findings if f.tier == "possible" and f.probes],
    }
    return {k: list(dict.fromkeys(v)) for k, v in out.items() if v}


@record(frozen=True)
class Witness:
    """One piece of evidence from outside the log: which entry it speaks for, and the line that shows it."""

    entry: str
    evidence: Evidence  # file: the script, "launch command" or "probe <id>"; signature: "<source>:<rule or id>"
    source: str  # "script", "command" or "probe"


def from_lint(findings) -> list[Witness]:
    """Witnesses from lint findings (gpudoctor.engine.lint.model.LintFinding), each citing the script's own line;
    notes are too faint to confirm anything."""
    texts: dict[str, list[str]] = {}
    out = []
    for f in findings:
        if f.severity not in ("error", "warning"):
            continue
        if f.path not in texts:
            try:
                with open(f.path, encoding="utf-8", errors="replace") as fh:
                    texts[f.path] = fh.read().splitlines()
            except OSError:
                texts[f.path] = []
        lines = texts[f.path]
        text = lines[f.line - 1].strip() if 0 < f.line <= len(lines) else f.message
        out.append(Witness(f.entry_id, Evidence(f.path, f.line, text or f.message, "script:" + f.rule), "script"))
    return out


def gather(script: str | None = None, cmd: str | None = None) -> tuple[list[Witness], list[tuple[str, str]]]:
    """The witnesses a training script (lint) and a launch command give, and the script's lint errors (path,
    message) when it could not be checked. Raises FixError for a command that cannot be parsed."""
    from gpudoctor.engine.lint.runner import lint_paths

    witnesses: list[Witness] = []
    errors: list[tuple[str, str]] = []
    if script:
        lint = lint_paths([script], jobs=1)
        witnesses, errors = from_lint(lint.findings), list(lint.errors)
    if cmd:
        witnesses += from_command(cmd)
    return witnesses, errors


def from_command(cmd: str) -> list[Witness]:
    """Witnesses from the launch command's own settings (gpudoctor.engine.lint.command); FixError if unparsable."""
    from gpudoctor.engine.lint.command import check_command

    return [Witness(f.entry_id, Evidence("launch command", 0, cmd, "command:" + f.rule), "command")
            for f in check_command(cmd) if f.severity in ("error", "warning")]


def from_probe_results(results: dict) -> list[Witness]:
    """Witnesses from probe results (entry id -> [gpudoctor.probes.base.Result]) that confirmed their entry."""
    out = []
    for entry, items in results.items():
        for res in items:
            status = getattr(res.status, "value", res.status)
            if status == "confirmed" and entry in (res.entries or (entry,)):
                out.append(Witness(entry, Evidence("probe " + res.probe, 0, res.summary, "probe:" + res.probe),
                                   "probe"))
    return out


def corroborate(diagnosis, witnesses: list[Witness], catalog):
    """The diagnosis with its findings re-tiered by the witnesses, and a note for each witness it could not place."""
    if not witnesses:
        return diagnosis
    entries = {e.id: e for e in catalog}
    by_entry: dict[str, list[Witness]] = {}
    for w in witnesses:
        if w.entry in entries:
            by_entry.setdefault(w.entry, []).append(w)
    findings = list(diagnosis.findings)
    present = {f.id for f in findings}
    matched = {f.id: f for f in findings if f.tier == "match"}
    notes = list(diagnosis.notes)
    # a bug the log does not name, whose consequence it matched: it enters as a possible cause, confirmed below
    for eid, ws in by_entry.items():
        # only a symptom the log left unexplained: a crash the log shows already says why the others timed out
        explained = [t for t in entries[eid].explains
                     if t in matched and not matched[t].consequence_of and not _own_cause(matched[t])]
        if eid not in present and explained:
            entry = entries[eid]
            findings.append(Finding(id=eid, title=entry.title, score=0.0, evidence=(), fix=entry.fix_summary,
                                    probes=entry.probes, signatures=(), tier="possible"))
            present.add(eid)
    # a guess is confirmed only where the log leans on it most: with an unrelated bug in the script (most scripts have
    # one) a third guess would otherwise become the answer; bench/witness_accuracy.py measures both sides
    guesses = [f.score for f in findings if f.tier != "match"]
    best_guess = max(guesses) if guesses else 0.0
    faint = set()
    out = []
    for f in findings:
        ws = by_entry.get(f.id)
        if ws and f.tier != "match" and f.score < best_guess - GUESS_TIE and f.evidence:
            faint.add(f.id)
            ws = None
        if not ws:
            out.append(f)
            continue
        extra = tuple(_dedupe(w.evidence for w in ws))
        sigs = f.signatures + tuple(dict.fromkeys(e.signature for e in extra))
        if f.tier == "match":
            f = replace(f, score=round(min(0.99, f.score + MATCH_GAIN), 3), evidence=f.evidence + extra,
                        signatures=sigs)
        else:
            f = replace(f, tier="match", score=round(max(CONFIRMED_MIN, f.score), 3), evidence=extra + f.evidence,
                        signatures=sigs)
        out.append(f)
        what = " and ".join(_NAMES[source] for source in sorted({w.source for w in ws}))
        notes.append(f"{f.id} is confirmed by {what}: {_where(ws)}")
    out = _order(out, entries)
    for eid, ws in by_entry.items():
        if eid in faint:
            notes.append(f"{_NAMES[ws[0].source]} also shows {eid} ({_where(ws)}); the log leans on other causes more")
        elif eid not in present:
            notes.append(f"{_NAMES[ws[0].source]} also shows {eid} ({_where(ws)}), which this log gives no sign of")
    from gpudoctor.engine.fix_pointer import point

    return replace(diagnosis, findings=point(entries, out), notes=notes)


def _order(findings: list[Finding], entries: dict) -> list[Finding]:
    """Matches best first, a cause above the symptom it explains; possible causes after, in their own order."""
    matches = {f.id: f for f in findings if f.tier == "match"}
    for eid in list(matches):
        for t in entries[eid].explains:
            if t not in matches or t == eid or _own_cause(matches[t]):
                continue
            f, target = matches[eid], matches[t]
            if f.score <= target.score:
                f = replace(f, score=round(min(0.99, target.score + EXPLAIN_MARGIN), 3))
            matches[eid] = replace(f, explains=tuple(dict.fromkeys(f.explains + (t,))))
            matches[t] = replace(target, consequence_of=tuple(sorted(set(target.consequence_of) | {eid})))
    ranked = sorted(matches.values(), key=lambda f: (-f.score, f.consequence_of != (), not _own_cause(f), f.id))
    return ranked + [f for f in findings if f.tier != "match"]


def _dedupe(evidence) -> list[Evidence]:
    seen, out = set(), []
    for e in evidence:
        if (e.file, e.line, e.signature) not in seen:
            seen.add((e.file, e.line, e.signature))
            out.append(e)
    return out


def _where(ws: list[Witness]) -> str:
    """Where the witnesses stand, compactly: "train.py:9, 11 (device-from-rank)", "probe port: <its summary>"."""
    parts = []
    for w in ws:
        if w.source == "probe":
            parts.append(f"{w.evidence.file}: {w.evidence.text}")
            continue
        if w.source == "command":
            parts.append(w.evidence.signature.split(":", 1)[-1])
            continue
        name = w.evidence.file.replace("\\", "/").rsplit("/", 1)[-1]
        rule = w.evidence.signature.split(":", 1)[-1]
        parts.append(f"{name}:{w.evidence.line} ({rule})")
    shown = list(dict.fromkeys(parts))
    return "; ".join(shown[:3]) + (f"; {len(shown) - 3} more" if len(shown) > 3 else "")
