"""Which of an entry's fixes a finding's evidence calls for: the entry's `fix_for`, read against what fired.

An entry can cover several causes with one symptom (D18: a DeepSpeed `auto` mismatch, or `loss.backward()` called
around the engine); its fix steps answer them in turn. The signature or rule that fired says which cause this log
shows, so the report leads with that step and `fix --log` plans only the fixes it calls for.
"""
from __future__ import annotations

from gpudoctor.engine.findings import Finding, PointedFix
from gpudoctor.kb.record import replace

RULE_WEIGHT = 0.9  # a structural rule read from the log: as strong as a signature gets
# a second witness (a lint check of --script or --cmd, a probe) adds its actions but does not choose the step over the
# log's own evidence: the log says which failure happened, the script only that a bug is there
WITNESS_WEIGHT = 0.5


def _weight(evidence: str, signatures: dict) -> float:
    if evidence in signatures:
        return signatures[evidence]
    return RULE_WEIGHT if evidence.startswith(("rule:", "hint:")) else WITNESS_WEIGHT


def pointed(entry, finding: Finding) -> PointedFix | None:
    """The step and actions the strongest evidence of the finding calls for; None when the entry says nothing."""
    if entry is None or not entry.fix_for:
        return None
    fired = set(finding.signatures) | {ev.signature for ev in finding.evidence}
    weight = {s.id: s.weight for s in entry.signatures}
    ranked = []
    for order, item in enumerate(entry.fix_for):
        hits = [ev for ev in item.evidence if ev in fired]
        if hits:
            best = max(hits, key=lambda ev: _weight(ev, weight))
            ranked.append((-_weight(best, weight), order, best, item))
    if not ranked:
        return None
    ranked.sort(key=lambda r: r[:2])
    # the strongest group that names a step chooses it; with none, the strongest evidence is still the reason
    because, number = next(((best, item.step) for *_, best, item in ranked if item.step), (ranked[0][2], 0))
    step = entry.fix[number - 1] if number else None
    actions = tuple(dict.fromkeys(a for *_, item in ranked for a in item.actions))
    return PointedFix(step=number, steps=len(entry.fix), text=step.text if step else "",
                      code=step.code if step else None, lang=step.lang if step else None, actions=actions,
                      because=because)


def point(entries: dict, findings: list[Finding]) -> list[Finding]:
    """The findings, each with the part of its entry's fix that its evidence calls for."""
    out = []
    for f in findings:
        p = pointed(entries.get(f.id), f)
        out.append(f if p == f.pointed else replace(f, pointed=p))
    return out
