"""Render a Diagnosis as terminal text, Markdown for an issue tracker (secrets redacted), or versioned JSON."""
from __future__ import annotations

import re

from gpudoctor.common import fit, fit_middle
from gpudoctor.engine.context_guess import from_content_only
from gpudoctor.term import Out, sanitize

def _secret_patterns():
    return [
        (re.compile(r"\b(hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|sk-[A-Za-z0-9_-]{16,}|"
                    r"xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|glpat-[A-Za-z0-9_-]{16,})\b"), "<redacted>"),
        (re.compile(r"(?i)\b(bearer|token)\s+[A-Za-z0-9._~+/=-]{12,}"), r"\1 <redacted>"),
        (re.compile(r"(?i)([A-Za-z0-9_]*(?:token|secret|passwd|password|api[_-]?key|access[_-]?key|auth)[A-Za-z0-9_]*"
                    r"[\"']?\s*[=:]\s*[\"']?)[^\s\"',;]+"), r"\1<redacted>"),
        # DB_PASS=x, SMTP_PASSWD: x (pass on its own, or after an underscore: not "passes=3" or "bypass=1")
        (re.compile(r"(?i)(\b(?:[A-Za-z0-9]+_)*pass(?:wd)?[\"']?\s*[=:]\s*[\"']?)[^\s\"',;]+"), r"\1<redacted>"),
        # a secret given as a flag's next word: --password x, --api-key x, --wandb_key x, -p is left alone
        (re.compile(r"(?i)(--[A-Za-z0-9_-]*(?:token|secret|passw(?:or)?d|pass|api[_-]?key|access[_-]?key|[_-]key|auth)"
                    r"[A-Za-z0-9_-]*\s+[\"']?)(?!-)[^\s\"',;]+"), r"\1<redacted>"),
        (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@"), r"\1<redacted>@"),
        ]


_SECRETS: list | None = None  # compiled on first use: only --format markdown redacts


def redact(text: str) -> str:
    global _SECRETS
    if _SECRETS is None:
        _SECRETS = _secret_patterns()
    for pattern, repl in _SECRETS:
        text = pattern.sub(repl, text)
    return text


def to_json(diagnosis) -> dict:
    from gpudoctor.engine.diagnose import SCHEMA

    def ev(e):
        return None if e is None else {"file": e.file, "line": e.line, "text": sanitize(e.text)}

    payload = {
        "schema": SCHEMA,
        "findings": [
            {
                "id": f.id, "tier": getattr(f, "tier", "match"), "title": f.title, "score": f.score,
                "evidence": [dict(ev(e), signature=e.signature) for e in f.evidence],
                "fix": f.fix, **pointed_json(f.pointed), "probes": list(f.probes), "signatures": list(f.signatures),
                "consequence_of": list(f.consequence_of), "explains": list(f.explains),
                **({"probe_results": [r.to_dict() for r in diagnosis.probe_results[f.id]]}
                   if f.id in diagnosis.probe_results else {}),
            }
            for f in diagnosis.findings
        ],
        "ranks": [
            {
                "rank": r.rank, "status": r.status, "sources": r.sources, "last_line": ev(r.last_line),
                "last_time": r.last_time, "last_enqueued": r.last_enqueued, "last_completed": r.last_completed,
                "timed_out_in": r.timed_out_in, "init_complete": r.init_complete, "first_error": ev(r.first_error),
            }
            for r in diagnosis.ranks
        ],
        "verdict": diagnosis.verdict,
        "inputs": [
            {"name": i.name, "kind": i.kind, "bytes": i.bytes, "lines": i.lines, "binary": i.binary,
             "cut_lines": i.cut_lines, "huge_lines": getattr(i, "huge_lines", False), "problem": i.problem}
            for i in diagnosis.inputs
        ],
        "engine": diagnosis.engine,
        "notes": diagnosis.notes,
    }
    if diagnosis.flight is not None:
        from gpudoctor.engine.flight import report_to_dict

        payload["flight"] = report_to_dict(diagnosis.flight)
    return payload


def pointed_json(p) -> dict:
    """The fix step and actions a finding's own evidence calls for (the entry's `fix_for`), as JSON fields."""
    step = None
    if p is not None and p.step:
        step = {"number": p.step, "of": p.steps, "text": p.text, "code": p.code, "lang": p.lang, "because": p.because}
    return {"fix_step": step, "fix_actions": list(p.actions) if p is not None else []}


def _fix_lines(f) -> tuple[str, str]:
    """The fix to print for a finding (the step its evidence calls for, else the entry's summary) and a note."""
    p = f.pointed
    if p is None or not p.step:
        return f.fix, ""
    return p.text, f" (fix step {p.step} of {p.steps}, for what this log shows)"


def _inputs_line(diagnosis) -> str:
    import os

    logs = [i for i in diagnosis.inputs if i.kind == "log"]
    lines = sum(i.lines for i in logs)
    unit = "line" if lines == 1 else "lines"
    if len(diagnosis.inputs) == 1:
        return f"{diagnosis.inputs[0].name} ({lines:,} {unit})"
    names = [i.name for i in diagnosis.inputs]
    common = os.path.commonpath(names) if all(n.startswith("/") == names[0].startswith("/") for n in names) else ""
    where = f"{common}/" if common else ", ".join(names[:2]) + ", ..."
    return f"{len(names)} files in {where} ({lines:,} {unit})"


def split_tiers(findings) -> tuple[list, list]:
    """(confident matches, possible causes), each best first."""
    matches = [f for f in findings if getattr(f, "tier", "match") == "match"]
    return matches, [f for f in findings if getattr(f, "tier", "match") != "match"]


def render_text(diagnosis, out: Out, catalog=None, witnessed: bool = False) -> None:
    """witnessed: the script, the command or the probes were already read (no hint how to add them)."""
    w = out.width
    head = _inputs_line(diagnosis)
    matches, possible = split_tiers(diagnosis.findings)
    if matches:
        n = len(matches)
        out.write(out.style(f"{n} known cause{'s' * (n != 1)} in {fit_middle(head, w - 22)}", "bold"))
    elif possible:
        out.write(out.style(f"No known cause matched in {fit_middle(head, w - 37)}. Possibly:", "bold"))
    else:
        out.write(out.style(f"No known cause in {fit_middle(head, w - 18)}", "bold"))
    _text_findings(diagnosis, out, matches, w)
    if possible:
        if matches:
            out.write("")
            out.write(out.style("Also possible (the failure lines read like these; no signature fired):", "bold"))
        _text_possible(diagnosis, out, possible, w)
    _text_ranks(diagnosis, out, w)
    if not diagnosis.findings:
        out.write("")
        out.write("Nothing in the catalogue explains this log, so gpudoctor names no cause.")
        out.write("Try: gpudoctor search \"<first error line>\", or add your own runbook with --kb.")
    elif not matches:
        out.write("")
        if from_content_only(possible):
            out.write("No failure line was found in this log: these guesses only say which entries its")
            out.write("content (the launch, the config, what it printed) reads like. Check them against")
            out.write("what you saw, or pass the log of the run that failed.")
        else:
            out.write("These are guesses from the failure lines and their context: no signature fired.")
            out.write("Read the entries (gpudoctor show ID) and check them against the log.")
        if catalog is not None and not witnessed:
            _text_confirm(out, possible, catalog, w)


_HOW = {"script": ("--script train.py", "the training script"),
        "command": ('--cmd "<command>"', "the launch command"),
        "probe": ("--probe", "probes on this machine")}


def _text_confirm(out: Out, possible, catalog, w: int) -> None:
    """How to turn a guess into a confirmed cause: the second witnesses that speak for these entries."""
    from gpudoctor.engine.corroborate import confirmable

    ways = confirmable(possible, catalog)
    if not ways:
        return
    out.write("")
    out.write("To confirm one, run diagnose again with what the log cannot show:")
    for kind, ids in ways.items():
        flag, what = _HOW[kind]
        out.write(fit(f"  {flag:<21} {what}, for {', '.join(ids)}", w))


def _text_possible(diagnosis, out: Out, possible, w: int) -> None:
    places = _Places(diagnosis)
    for k, f in enumerate(possible, 1):
        out.write("")
        label = f"{k:>2}. {f.id:<5}"
        score = f"possible {f.score:.2f}"
        title = fit(f.title, w - len(label) - len(score) - 3)
        out.write(f"{out.style(label, 'id')} {title}{' ' * max(1, w - len(label) - len(title) - len(score) - 1)}"
                  f"{out.style(score, 'dim')}")
        for e in f.evidence:
            _evidence(out, e, places, w)
        out.write("    " + out.style(f"more: gpudoctor show {f.id}", "dim"))


def _text_findings(diagnosis, out: Out, findings, w: int) -> None:
    places = _Places(diagnosis)
    for k, f in enumerate(findings, 1):
        out.write("")
        label = f"{k:>2}. {f.id:<5}"
        score = f"{f.score:.2f}"
        title = fit(f.title, w - len(label) - len(score) - 3)
        out.write(f"{out.style(label, 'id')} {title}{' ' * max(1, w - len(label) - len(title) - len(score) - 1)}{score}")
        if f.consequence_of:
            out.write("    " + out.style(f"likely a consequence of {', '.join(f.consequence_of)}, not the cause", "yellow"))
        for e in f.evidence:
            _evidence(out, e, places, w)
        fix, which = _fix_lines(f)
        for ln in _wrap("fix: " + fix, w - 4):
            out.write("    " + ln)
        if f.id in diagnosis.probe_results:
            for res in diagnosis.probe_results[f.id]:
                status = res.status.value
                if status == "ruled_out" and f.id not in (res.entries or ()):
                    status = "nothing"  # healthy here and now, which says nothing about what the log shows
                word = {"confirmed": "confirmed", "ruled_out": "ruled out", "inconclusive": "unclear",
                        "skipped": "skipped", "errored": "error", "nothing": "nothing found now"}[status]
                style = {"confirmed": "fail", "ruled_out": "ok"}.get(status, "dim")
                out.write("    " + out.style(f"probe {res.probe}: {word}", style) + " " +
                          fit(sanitize(res.summary), max(20, w - 18 - len(res.probe) - len(word))))
        elif f.probes:
            for i, ln in enumerate(_wrap("confirm: gpudoctor probe " + " ".join(f.probes), w - 6)):
                out.write(out.style(("    " if i == 0 else "      ") + ln, "dim"))
        for i, ln in enumerate(_wrap(f"more: gpudoctor show {f.id}{which}", w - 6)):
            out.write(out.style(("    " if i == 0 else "      ") + ln, "dim"))


RANK_ROWS = 64  # rows of the ranks table in a terminal


def shown_ranks(ranks: list, limit: int) -> list:
    """The ranks a cut table shows, in their order: every rank whose status is not the most common one first (the
    one that died among thousands waiting), then the others up to the limit."""
    if len(ranks) <= limit:
        return list(ranks)
    from collections import Counter

    usual = Counter(r.status for r in ranks).most_common(1)[0][0]
    odd = [i for i, r in enumerate(ranks) if r.status != usual][:limit]
    rest = [i for i, r in enumerate(ranks) if r.status == usual][: limit - len(odd)]
    return [ranks[i] for i in sorted(odd + rest)]


def _text_ranks(diagnosis, out: Out, w: int) -> None:
    if diagnosis.ranks:
        out.write("")
        out.write(out.style("Ranks", "bold"))
        out.write(out.style(f"  {'RANK':<5} {'STATUS':<9} {'DONE/ENQ':<9} {'INIT':<4} FIRST ERROR / LAST LINE", "dim"))
        places = _Places(diagnosis)
        for r in shown_ranks(diagnosis.ranks, RANK_ROWS):
            seq = f"{_n(r.last_completed)}/{_n(r.last_enqueued)}"
            init = {True: "yes", False: "no", None: "-"}[r.init_complete]
            e = r.first_error or r.last_line
            where = f"{_where(e, places)} {_body(e.text)}" if e else ""
            style = {"died": "fail", "behind": "yellow", "no-init": "yellow", "missing": "dim"}.get(r.status)
            status = out.style(f"{r.status:<9}", style) if style else f"{r.status:<9}"
            used = len(f"  {r.rank:<5} {r.status:<9} {seq:<9} {init:<4} ")  # a long rank or count widens its column
            out.write(f"  {r.rank:<5} {status} {seq:<9} {init:<4} {fit(where, max(10, w - used))}")
        if len(diagnosis.ranks) > RANK_ROWS:
            out.write(out.style(f"  ... {len(diagnosis.ranks) - RANK_ROWS} more ranks like the rest (--json lists all)",
                                "dim"))
    if diagnosis.flight is not None and getattr(diagnosis.flight, "summary", None):
        out.write("")
        out.write(out.style("Flight recorder", "bold"))
        for ln in _wrap(sanitize(diagnosis.flight.summary), w - 2):
            out.write("  " + ln)
    if diagnosis.verdict:
        out.write("")
        out.write(out.style("Which rank?", "bold"))
        for sentence in diagnosis.verdict:
            for i, ln in enumerate(_wrap(sanitize(sentence), w - 4)):
                out.write(("  - " if i == 0 else "    ") + ln)
    for note in diagnosis.notes:
        for i, ln in enumerate(_wrap(f"note: {sanitize(note)}", w - 6)):
            out.write(out.style(ln if i == 0 else "      " + ln, "dim"))


def render_markdown(diagnosis) -> str:
    lines = ["## gpudoctor diagnosis", "", f"Inputs: {_md(_inputs_line(diagnosis))}", ""]
    matches, possible = split_tiers(diagnosis.findings)
    if not diagnosis.findings:
        lines += ["No known cause: nothing in the gpudoctor catalogue matches these logs.", ""]
    elif not matches and from_content_only(possible):
        lines += ["No known cause matched, and no failure line was found. The log's content reads most like:", ""]
    elif not matches:
        lines += ["No known cause matched. Possibly:", ""]
    for k, f in enumerate(matches, 1):
        lines.append(f"### {k}. {f.id}: {f.title} (score {f.score:.2f})")
        lines.append("")
        if f.consequence_of:
            lines += [f"Likely a consequence of {', '.join(f.consequence_of)}.", ""]
        lines += _md_evidence(f.evidence)
        fix, which = _fix_lines(f)
        lines += [f"**Fix:** {fix}", ""]
        if which:
            p = f.pointed
            if p.code:
                lines += [f"```{p.lang or ''}", *p.code.splitlines(), "```", ""]
            lines += [f"Step {p.step} of {p.steps} of `gpudoctor show {f.id}`, the one this log's evidence calls for.",
                      ""]
        if f.id in diagnosis.probe_results:
            lines += [f"- probe `{r.probe}`: {r.status.value}: {_md(r.summary)}" for r in diagnosis.probe_results[f.id]]
            lines.append("")
        elif f.probes:
            lines += ["**Confirm:** " + ", ".join(f"`gpudoctor probe {p}`" for p in f.probes), ""]
    if possible:
        if matches:
            lines += ["### Also possible", "", "The failure lines read like these entries; no signature fired.", ""]
        for k, f in enumerate(possible, 1):
            lines += [f"{'####' if matches else '###'} {k}. {f.id}: {f.title} (possible, score {f.score:.2f})", ""]
            lines += _md_evidence(f.evidence)
            lines += [f"More: `gpudoctor show {f.id}`", ""]
    if diagnosis.ranks:
        lines += ["### Ranks", "", "| rank | status | done/enqueued | init | first error |", "|---|---|---|---|---|"]
        for r in diagnosis.ranks:
            e = r.first_error
            err = _md(e.text[:120]) if e else ""
            init = {True: "yes", False: "no", None: "-"}[r.init_complete]
            lines.append(f"| {r.rank} | {r.status} | {_n(r.last_completed)}/{_n(r.last_enqueued)} | {init} | {err} |")
        lines.append("")
    if diagnosis.verdict:
        lines += ["### Which rank?", ""] + [f"- {_md(v)}" for v in diagnosis.verdict] + [""]
    if diagnosis.notes:
        lines += ["### Notes", ""] + [f"- {_md(n)}" for n in diagnosis.notes] + [""]
    return "\n".join(lines).rstrip() + "\n"


_MD_SPECIAL = {ord(c): "\\" + c for c in "\\`*_[]<>|~&"}


def _md(text: str) -> str:
    """Text that may quote a log, for Markdown outside a code block: safe to print, secrets redacted, and every
    character Markdown or HTML would act on (a tag, a link, a code fence, a table bar) escaped to stay text."""
    return redact(sanitize(text).strip()).translate(_MD_SPECIAL)


def _md_evidence(evidence) -> list[str]:
    """Log lines in a code block, then gpudoctor's reading of them (error-code meanings, where it was raised)."""
    reading = ("meaning", "because", "cut-traceback")
    logged = [e for e in evidence if e.signature not in reading]
    lines = (["```text"] + [redact(f"{e.file}:{e.line}: {sanitize(e.text).strip()}") for e in logged] + ["```", ""]
             if logged else [])
    notes = [e for e in evidence if e.signature in reading]
    if notes:
        word = {"meaning": "Means", "because": "Why"}
        lines += [f"- {word[e.signature]}: {_md(e.text)}" if e.signature in word else
                  f"- Frames of the traceback at {_md(e.file)}:{e.line} (cut before its error line): "
                  f"{_md(e.text)}" for e in notes] + [""]
    return lines


class _Places:
    """How evidence is located in one report: by line alone when there is one input; otherwise by the file's name,
    with as many of its folders as it takes to tell two files of one name apart (node0/rank0.log, node1/rank0.log)."""

    __slots__ = ("single", "labels")

    def __init__(self, diagnosis):
        names = [i.name for i in diagnosis.inputs]
        self.single = len(names) == 1
        self.labels = unique_labels(names)


def unique_labels(names: list[str]) -> dict[str, str]:
    """Each path's shortest tail of components that no other path ends with."""
    parts = {name: name.replace("\\", "/").rstrip("/").split("/") for name in names}
    depth = {name: 1 for name in names}
    for _ in range(8):
        tails: dict[str, list[str]] = {}
        for name in names:
            tails.setdefault("/".join(parts[name][-depth[name]:]), []).append(name)
        clashing = [n for group in tails.values() if len(group) > 1 for n in group if depth[n] < len(parts[n])]
        if not clashing:
            break
        for name in clashing:
            depth[name] += 1
    return {name: "/".join(parts[name][-depth[name]:]) for name in names}


def _where(e, places: _Places) -> str:
    label = places.labels.get(e.file) or e.file.rsplit("/", 1)[-1]
    if e.line == 0:  # a finding from flight-recorder dumps, which have no lines
        return _short(label)
    own = places.single and not e.signature.startswith("script:")  # a script's line is never the log's
    return f"line {e.line}" if own else f"{_short(label)}:{e.line}"


def _body(text: str) -> str:
    """A log line without its prefixes, on one line, safe to print."""
    from gpudoctor.engine.prefix import parse_prefix

    return " ".join(sanitize(parse_prefix(text).body).split())


def _evidence(out: Out, e, places: _Places, width: int) -> None:
    """One evidence line, located and wrapped to at most two terminal lines."""
    import textwrap

    if e.signature == "cut-traceback":  # a traceback cut before its error: the frames it stopped in, joined
        loc = f"frames of the traceback at {_where(e, places)}:"
        out.write("    " + out.style(loc, "dim"))
        for ln in _wrap(" ".join(sanitize(e.text).split()), width - 8)[:2]:
            out.write("      " + ln)
        return
    if e.signature in ("meaning", "because"):  # gpudoctor's reading of the line above, not a log line
        word = "means: " if e.signature == "meaning" else "why: "
        for i, ln in enumerate(_wrap(word + " ".join(sanitize(e.text).split()), width - 14)[:3]):
            out.write(" " * (6 if i == 0 else 13) + out.style(ln, "dim"))
        return
    from gpudoctor.engine.columns import shown

    loc = _where(e, places)
    text = " ".join(sanitize(shown(e.text)).split())
    room = max(20, width - 4 - len(loc) - 2)
    if text.startswith("…") and len(text) > 2 * room:
        # the stretch of a giant line kept around its match, which sits at its centre: show the centre
        mid = len(text) // 2
        text = "…" + text[mid - room + 2: mid + room - 2].strip() + "…"
    parts = textwrap.wrap(text, room, break_on_hyphens=False) or [""]
    out.write("    " + out.style(loc, "dim") + "  " + parts[0])
    if len(parts) > 1:
        rest = " ".join(parts[1:])
        out.write(" " * (4 + len(loc) + 2) + fit(rest, room))


def _n(value) -> str:
    return "-" if value is None else str(value)


def _short(name: str) -> str:
    return name if len(name) <= 28 else "…" + name[-27:]


def _wrap(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=max(20, width), break_long_words=True, break_on_hyphens=False) or [""]
