"""When a log shows no failure at all: the catalogue entries its content reads most like, as faint possible causes.

A launch command with one process, an `accelerate env` print-out, a run that stops printing: such a log holds no
error line for the possible tier to search, yet its words (the launcher, its flags, the config it echoes, what the
user says it did) are what a reader would search the catalogue with. The log's last distinct lines are searched as
one query, and the best entries are offered as guesses, fainter than a guess from a failure line. Nothing here ever
makes a confident match.
"""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence, Finding

CONTEXT_CHARS = 3000  # the log's last distinct lines, searched together
TAIL_CHARS = 200_000  # only the end of a long text is read for them
LINE_CHARS = 200  # a line's first characters: a long one (a config dump) must not fill the query alone
MIN_SCORE = 0.5  # search score under which the content shares only stray words with an entry
SCALE = 0.4  # shown score: fainter than a guess from a failure line (engine/possible.py SCALE 0.6)
LIMIT = 3
BASIS = "log-content"  # the signature name such a finding carries, so that reports can say what it rests on


# torchrun's own banner (every run under it prints it): it tells how the run was launched, nothing of its failure,
# and its words ("each process", "OMP_NUM_THREADS") read like the entries about process counts
_LAUNCHER_BANNER = ("Setting OMP_NUM_THREADS environment variable for each process", "*****")


def _distinct_lines(texts: dict[str, str]) -> list[tuple[str, int, str]]:
    """(file, line number, text) of the last distinct non-blank lines across the texts, in reading order, their
    prefixes (rank tags, timestamps) left out, as many as fit in CONTEXT_CHARS."""
    from gpudoctor.engine.possible import line_words

    picked: list[tuple[str, int, str]] = []
    seen: set[str] = set()
    size = 0
    for name in reversed(list(texts)):
        text = texts[name]
        start = max(0, len(text) - TAIL_CHARS)
        first_line = text.count("\n", 0, start) + 1
        lines = text[start:].split("\n")  # numbered as the scanner numbers them: by newline alone
        if start:
            lines, first_line = lines[1:], first_line + 1  # the first one may be cut
        for offset in range(len(lines) - 1, -1, -1):
            body = line_words(lines[offset])[:LINE_CHARS]
            if not body or body in seen or any(b in lines[offset] for b in _LAUNCHER_BANNER):
                continue
            if size + len(body) + 1 > CONTEXT_CHARS:
                return picked[::-1]
            seen.add(body)
            size += len(body) + 1
            picked.append((name, first_line + offset, body))
    return picked[::-1]


def _evidence(lines: list[tuple[str, int, str]], matched: tuple[str, ...], weight) -> tuple[Evidence, ...]:
    """The one or two lines that hold most of the words the entry matched on, each word by its rarity in the
    catalogue (weight: term -> idf), the later line on a tie."""
    from gpudoctor.kb.search import tokenize

    words = {w.lower() for w in matched}
    scored = []
    for k, (name, number, text) in enumerate(lines):
        held = sum(weight(w) for w in words & set(tokenize(text)))
        if held > 0:
            scored.append((held, k, name, number, text))
    scored.sort(key=lambda s: (-s[0], -s[1]))
    best = sorted(scored[:2], key=lambda s: s[1])
    return tuple(Evidence(name, number, text, BASIS) for _, _, name, number, text in best)


def context_findings(catalog, texts: dict[str, str], exclude: set[str]) -> list[Finding]:
    """The entries the log's content reads most like, as tier "possible" with their shown score, best first."""
    from gpudoctor.engine.possible import failure_line_index

    lines = _distinct_lines(texts)
    if not lines:
        return []
    index = failure_line_index(catalog)
    entries = {e.id: e for e in catalog}
    found = []
    for hit in index.search("\n".join(text for _, _, text in lines), limit=LIMIT + len(exclude) + 1, lines=False):
        entry = entries.get(hit.id)
        if hit.score < MIN_SCORE or entry is None or hit.id in exclude or entry.section == "guides":
            continue
        evidence = _evidence(lines, hit.matched, index.idf)
        if not evidence:
            continue
        found.append(Finding(id=entry.id, title=entry.title, score=round(min(hit.score, 1.0) * SCALE, 3),
                             evidence=evidence, fix=entry.fix_summary, probes=entry.probes, signatures=(BASIS,),
                             tier="possible"))
    return found[:LIMIT]


def from_content_only(findings) -> bool:
    """Whether every finding is a guess resting on the log's content alone (the log holds no failure line)."""
    return bool(findings) and all(tuple(getattr(f, "signatures", ())) == (BASIS,) for f in findings)
