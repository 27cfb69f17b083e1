"""Score catalogue entries from matched signatures, and rank a cause above the timeout it produced."""
from __future__ import annotations

from gpudoctor.kb.model import Entry
from gpudoctor.kb.record import field, record

REPORT_MIN = 0.4  # below this an entry shares only weak or context lines with the log: not reported
CONTEXT_GAIN = 0.5  # how far context lines can close the gap to 1
MAX_EVIDENCE = 6


@record(frozen=True)
class Evidence:
    file: str
    line: int
    text: str
    signature: str  # which signature of the entry matched this line


@record(frozen=True)
class Finding:
    id: str
    title: str
    score: float  # 0..1
    evidence: tuple[Evidence, ...]
    fix: str
    probes: tuple[str, ...]
    signatures: tuple[str, ...]  # ids of the signatures that matched
    consequence_of: tuple[str, ...] = ()  # findings that explain this one (a timeout caused by a crash)
    explains: tuple[str, ...] = ()
    tier: str = "match"  # "match": a signature or rule fired; "possible": only the failure lines' words agree
    pointed: "PointedFix | None" = None  # the fix step and actions this finding's evidence calls for (fix_for)


@record(frozen=True)
class PointedFix:
    """The part of an entry's fix that a finding's own evidence calls for (gpudoctor.engine.fix_pointer)."""

    step: int  # 1-based number of the entry's fix step; 0 when the evidence names only fix actions
    steps: int  # how many steps the entry's fix has
    text: str  # that step's text ("" with no step)
    code: str | None
    lang: str | None
    actions: tuple[str, ...]  # ids of the entry's fix actions it calls for, best first
    because: str  # the signature or rule id that chose the step


@record
class SignatureHits:
    """Everything one signature matched across all sources: (file, Hit) pairs and a total count."""

    count: int = 0
    lines: list = field(default_factory=list)  # list[tuple[str, Hit]]


def score_entry(entry: Entry, matched: dict[str, SignatureHits]) -> tuple[float, list[str]]:
    """Noisy-OR of the weights of matched signatures whose co-requirements hold; context only adds."""
    present = {sid for sid, h in matched.items() if h.count}
    effective = [s for s in entry.signatures if s.id in present and all(n in present for n in s.needs)
                 and all(_comes_after(matched[s.id], matched.get(a)) for a in s.after)
                 and len({file for file, _ in matched[s.id].lines}) >= s.min_files]
    strong = [s for s in effective if not s.context]
    if not strong:
        return 0.0, []
    miss = 1.0
    for sig in strong:
        miss *= 1.0 - sig.weight
    score = 1.0 - miss
    context = [s for s in effective if s.context]
    if context:
        boost = min(1.0, sum(s.weight for s in context))
        score += (1.0 - score) * CONTEXT_GAIN * boost
    return min(score, 0.99), [s.id for s in strong + context]


def _comes_after(hits: SignatureHits, earlier: SignatureHits | None) -> bool:
    """Some hit of `hits` sits on a later line of the same file than some hit of `earlier`."""
    if earlier is None or not earlier.count:
        return False
    first_seen: dict[str, int] = {}
    for file, hit in earlier.lines:
        first_seen[file] = min(first_seen.get(file, hit.line_no), hit.line_no)
    return any(file in first_seen and hit.line_no > first_seen[file] for file, hit in hits.lines)


def build_findings(entries: dict[str, Entry], matched: dict[str, dict[str, SignatureHits]]) -> list[Finding]:
    """Findings best first; an entry that explains another (a crash explaining a timeout) ranks above it."""
    scored: dict[str, tuple[float, list[str]]] = {}
    for eid, sigs in matched.items():
        entry = entries.get(eid)
        if entry is None:
            continue
        score, used = score_entry(entry, sigs)
        if score >= REPORT_MIN:
            scored[eid] = (score, used)

    explained_by: dict[str, list[str]] = {}
    for eid in scored:
        for target in _explains(entries[eid]):
            if target in scored and target != eid:
                explained_by.setdefault(target, []).append(eid)
    # a symptom never outranks the cause found beside it; the symptom in turn corroborates the cause
    adjusted = {eid: s for eid, (s, _) in scored.items()}
    for target, causes in explained_by.items():
        for cause in causes:
            if adjusted[cause] < scored[target][0]:
                adjusted[cause] = round((adjusted[cause] + scored[target][0]) / 2, 3)
        top = max(adjusted[c] for c in causes)
        if adjusted[target] >= top:
            adjusted[target] = round(top - 0.01, 3)
    findings = []
    for eid, (_, used) in scored.items():
        entry = entries[eid]
        evidence: list[Evidence] = []
        for sid in used:
            for file, hit in matched[eid][sid].lines:
                evidence.append(Evidence(file, hit.line_no, hit.text, sid))
        sigs = {sig.id: sig for sig in entry.signatures}
        # the lines of the strongest signatures first; context lines last
        evidence = sorted(_dedupe(evidence), key=lambda ev: (sigs[ev.signature].context, -sigs[ev.signature].weight,
                                                              ev.file, ev.line))
        # a context line that is all prefix (torchrun's empty banner line, whose logger path says torch.distributed)
        # shows the reader nothing: it still counts, but it is not shown beside evidence that says something
        shown = [ev for ev in evidence if not (sigs[ev.signature].context and _bare_prefix(ev.text))]
        evidence = (shown or evidence)[:MAX_EVIDENCE]
        findings.append(Finding(
            id=eid, title=entry.title, score=round(adjusted[eid], 3), evidence=tuple(evidence),
            fix=entry.fix_summary, probes=entry.probes, signatures=tuple(used),
            consequence_of=tuple(sorted(explained_by.get(eid, []))),
            explains=tuple(t for t in _explains(entry) if t in scored),
        ))
    findings.sort(key=lambda f: (-f.score, f.consequence_of != (), f.id))
    return findings


def _bare_prefix(text: str) -> bool:
    from gpudoctor.engine.prefix import parse_prefix

    return not parse_prefix(text).body.strip()


def _explains(entry: Entry) -> tuple[str, ...]:
    return entry.explains


def _dedupe(evidence: list[Evidence]) -> list[Evidence]:
    seen: set[tuple[str, int]] = set()
    out = []
    for ev in sorted(evidence, key=lambda e: (e.file, e.line)):
        if (ev.file, ev.line) not in seen:
            seen.add((ev.file, ev.line))
            out.append(ev)
    return out
