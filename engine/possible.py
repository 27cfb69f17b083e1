"""The "possible" tier: when the log shows a failure, rank catalogue entries by how well its failure lines read like theirs."""
from __future__ import annotations

import re

from gpudoctor.engine.failure_lines import EXCEPTION_HEAD, MAX_QUERY_CHARS
from gpudoctor.engine.findings import Evidence, Finding
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.kb.boilerplate import without_stock_advice

# launcher bookkeeping around a failure: it proves there was one but says nothing about which
_BOOKKEEPING = _lazy(
    r"ChildFailedError|Root Cause \(first observed failure\)|^\s*(?:exitcode|error_file|traceback|rank|host|time)\s*:|"
    r"To enable traceback see|torch\.distributed\.elastic\.multiprocessing\.errors|FAILED\s*$|"
    r"Sending process \d+ closing signal|^\s*\[\d+\]:\s*$|failures:\s*$|Setting OMP_NUM_THREADS|"
    r"^\s*warnings\.warn\(|^\s*\*{8,}|FutureWarning|DeprecationWarning|TORCHELASTIC_ENABLE_FILE_TIMER|"
    r"TORCHELASTIC_HEALTH_CHECK_PORT|FAILED with no error file|Decorate your entrypoint|rdzv_configs\s*:"
)
# errors of the script or its environment, not of distributed training: a guess from their words stays faint
_ELSEWHERE = _lazy(r"\b(?:ModuleNotFoundError|ImportError|SyntaxError|IndentationError|NameError|"
                        r"FileNotFoundError|UnicodeDecodeError|JSONDecodeError|PermissionError|IsADirectoryError)\b|"
                        r"\bNo module named\b|\bloss (?:is )?nan\b|\bNaN or Inf found\b", re.IGNORECASE)
CUT_WEIGHT = 0.8  # the frames of a cut traceback say where, not what: a little fainter than an error line
# a timeout or a lost peer is how every rank that waited on a failed one ends: beside a line that is a rank's own
# error it says what followed, not what went wrong, and its stock words (timed out, closed by peer) must not outvote it
CONSEQUENCE_WEIGHT = 0.6
MAX_QUERIES = 12  # distinct failure lines searched
MIN_SEARCH = 0.3  # search score below which an entry shares only stray words with the failure
MIN_SEARCH_PASTED = 0.6  # a pasted line with no failure word must read much like an entry's own words
SCALE = 0.6  # a possible cause never scores like a confident match
MIN_POSSIBLE = 0.15  # shown score under which a guess is not worth a reader's time
LIMIT = 3  # possible causes shown when nothing matched
LIMIT_BESIDE_MATCH = 2  # shown after confident findings: only guesses that read almost word for word


def _informative(lines: list[Evidence]) -> list[tuple[Evidence, float]]:
    """The lines worth searching, each with how much its words count (launcher bookkeeping and errors that
    distributed training does not cause, little)."""
    from gpudoctor.engine.prefix import parse_prefix

    from gpudoctor.engine.ranks import classify

    weighted = []
    bodies = [parse_prefix(ev.text).body for ev in lines]
    kinds = [classify(body) for body in bodies]
    # an exception that is some rank's own error, not its waiting on the others
    own_error = any(kind == "crash" and EXCEPTION_HEAD.search(body) and not _BOOKKEEPING.search(ev.text)
                    for ev, body, kind in zip(lines, bodies, kinds))
    for ev, body, kind in zip(lines, bodies, kinds):
        # a Ctrl-C's KeyboardInterrupt says where the run was stopped, not what went wrong: as faint as bookkeeping
        weight = 0.4 if _BOOKKEEPING.search(body) or kind == "interrupted" else 0.5 if _ELSEWHERE.search(body) else 1.0
        if ev.signature == "cut-traceback":
            weight = min(weight, CUT_WEIGHT)
        if own_error and kind in ("timeout", "lost-peer"):
            weight = min(weight, CONSEQUENCE_WEIGHT)
        weighted.append((ev, weight))
    # the first failures name the cause, the last ones how the run ended; the middle repeats them
    strong = [w for w in weighted if w[1] == 1.0]
    if len(strong) > MAX_QUERIES:
        strong = strong[: MAX_QUERIES // 2] + strong[-(MAX_QUERIES - MAX_QUERIES // 2):]
    weak = [w for w in weighted if w[1] < 1.0][: max(0, MAX_QUERIES - len(strong))]
    return strong + weak


def aggregate(scores: list[float]) -> float:
    """One entry's standing from its per-line search scores, best first: the best line decides, agreeing lines add."""
    return scores[0] + 0.5 * sum(scores[1:2]) + 0.25 * sum(scores[2:3])


# a source path or file location ("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553]", "at ../torch/csrc/..."):
# it names the file that printed the message, not the cause, and its directory words (distributed, launch, tcp)
# match entries that merely mention them; the file's own name is kept (data_parallel.py does say DataParallel)
_PATH = _lazy(r"(?:\b[A-Za-z]:)?(?:[\w.~+-]{0,255}[/\\]){1,64}([\w.+-]{1,255}?)(?::\d+)*:?(?=[\s\]),'\"]|$)")


LINE_WORDS_CHARS = 8192  # a failure line's words to search come from its start; a query keeps far fewer


def line_words(text: str) -> str:
    """A log line as words to search: its prefixes (rank tags, timestamps) and torch's stock advice after a CUDA error
    left out, paths cut to their file names, whitespace collapsed."""
    from gpudoctor.engine.prefix import parse_prefix

    body = without_stock_advice(" ".join(parse_prefix(text[:LINE_WORDS_CHARS]).body.split()))
    # path by path: a long run of word characters without a slash (a hex dump, a hash) would otherwise be rescanned
    # from each of its characters
    return " ".join(" ".join(_PATH.sub(_file_name, w).split()) if "/" in w or "\\" in w else w for w in body.split())


def failure_line_index(catalog):
    """The catalogue's search index for log lines, built once per catalogue object."""
    return catalog.derived("failure-line-index", _specific_index)


def _file_name(m: re.Match) -> str:
    """A path's file name; prose with a slash in it ("corrupted/incomplete", "and/or") stays as it is."""
    whole, name = m.group(0), m.group(1)
    if whole.count("/") + whole.count("\\") >= 2 or re.search(r"\.[A-Za-z]\w*$", name):
        return " " + name + " "
    return whole


def _specific_index(catalog):
    """The catalogue's search index with the phrase bonus weighed by how specific the matched phrase is (built once
    per catalogue: `catalog.derived("failure-line-index", _specific_index)`)."""
    from gpudoctor.kb.search import SearchIndex

    class FailureLineIndex(SearchIndex):
        """A failure line is long and full of generic words: a short stock phrase inside it ("Connection closed by
        peer", "OpType=ALLREDUCE") must not earn the bonus a whole pasted message earns. The bonus is capped by the
        phrase's own weight, the summed IDF of its terms, instead of the whole query's, unless the phrase is nearly
        the whole line."""

        def _phrase_bonuses(self, q_lower: str, best_possible: float) -> dict[int, float]:
            best: dict[int, float] = {}
            for i, p, ratio in self._phrase_matches(q_lower):
                whole = len(p) >= WHOLE_PHRASE * len(q_lower)  # the line is the phrase: a pasted message
                weight = best_possible if whole else min(best_possible, self._mass(p))
                best[i] = max(best.get(i, 0.0), weight * (ratio - 80) / 20.0)
            return best

        def _phrase_matches(self, q_lower: str):
            """The parent's phrase scoring, over only the phrases that share a word of five or more letters with
            the line: a phrase scoring 85 against a line has most of its words in it intact, and scoring all
            thousand-odd phrases on every failure line was most of a short paste's diagnosis time."""
            from rapidfuzz import fuzz, process

            owners, phrases, by_word, always = self._phrase_table()
            picked = set(always)
            for word in set(_LONG_WORD.findall(q_lower)):
                picked.update(by_word.get(word, ()))
            keys = sorted(picked)
            for _phrase, ratio, k in process.extract(q_lower, [phrases[k] for k in keys], scorer=fuzz.partial_ratio,
                                                     score_cutoff=85, limit=None):
                yield owners[keys[k]], phrases[keys[k]], ratio

        def _phrase_table(self):
            """The index's phrase table (cached with it); built here from an index cached before it had one."""
            if not self.phrase_table:
                from gpudoctor.kb.search import phrase_table

                self.phrase_table = phrase_table(self.phrases)
            return self.phrase_table

        def _mass(self, phrase: str) -> float:
            from gpudoctor.kb.search import tokenize

            masses = self.__dict__.setdefault("_masses", {})
            if phrase not in masses:
                masses[phrase] = sum(self._idf(t) for t in set(tokenize(phrase)))
            return masses[phrase]

    return FailureLineIndex(**vars(catalog.search_index()))


_LONG_WORD = _lazy(r"[a-z0-9]{5,}")  # kb/search.py's LONG_WORD, which its phrase table is keyed by
WHOLE_PHRASE = 0.8  # a phrase this long against the line is the line itself, pasted
PRIOR_GAIN = 1.0  # how much a signature score under the report threshold adds to an entry's standing


FUSED_LINES = 5  # the last failure lines searched together, as a user pastes "the error lines" into a search box
FUSED_WEIGHT = 1.0


def _add_fused(index, informative: list[tuple[Evidence, float]], best: dict) -> None:
    """The last few failure lines as one query: an entry whose words are spread over several lines (the error on one,
    the collective or the launcher on the next) scores as a whole, not line by line. It only reorders the entries
    some line reached alone (a log no line ties to any entry gets no guess from words pooled across it), and its
    evidence is that entry's own best line."""
    picked = [ev for ev, weight in informative if weight >= 0.5][-FUSED_LINES:]
    if len(picked) < 2:
        return  # one line was searched alone already
    query = "\n".join(line_words(ev.text)[:MAX_QUERY_CHARS] for ev in picked)
    for hit in index.search(query, limit=5, lines=False):
        if hit.score < MIN_SEARCH:
            continue
        if hit.id in best:
            own = max(best[hit.id], key=lambda s: s[0])
            best[hit.id].append((hit.score * FUSED_WEIGHT, own[1]))


def possible_findings(catalog, lines: list[Evidence], exclude: set[str], limit: int = LIMIT,
                      prior: dict | None = None) -> list[Finding]:
    """Entries whose error strings and symptoms read most like the failure lines, as tier "possible".

    prior: entry id -> (score, evidence) of signatures that fired too weakly to report; they add to the words."""
    from gpudoctor.engine.errcodes import explain

    if not lines:
        return []
    index = failure_line_index(catalog)
    entries = {e.id: e for e in catalog}
    best: dict[str, list[tuple[float, Evidence]]] = {}
    for ev, weight in _informative(lines):
        query = line_words(ev.text)[:MAX_QUERY_CHARS]
        meanings = explain(query)
        if meanings:  # "ncclSystemError" says little by itself; what it stands for says more
            query += " " + " ".join(m.text for m in meanings)
        floor = MIN_SEARCH_PASTED if ev.signature == "pasted-line" else MIN_SEARCH
        for hit in index.search(query, limit=5, lines=False):
            if hit.score < floor:
                continue
            best.setdefault(hit.id, []).append((hit.score * weight, ev))
    _add_fused(index, _informative(lines), best)
    ranked = []
    prior = prior or {}
    for eid in prior:
        best.setdefault(eid, [])
    for eid, scores in best.items():
        entry = entries.get(eid)
        if entry is None or eid in exclude or entry.section == "guides":
            continue
        scores.sort(key=lambda s: -s[0])
        weak, weak_evidence = prior.get(eid, (0.0, ()))
        standing = (aggregate([s for s, _ in scores]) if scores else 0.0) + PRIOR_GAIN * weak
        evidence = list({(ev.file, ev.line): ev for _, ev in scores}.values())[:2] or list(weak_evidence)[:2]
        if evidence:
            ranked.append((standing, eid, evidence))
    ranked.sort(key=lambda r: (-r[0], r[1]))
    findings = []
    ranked = [r for r in ranked if r[0] * SCALE >= MIN_POSSIBLE]
    for score, eid, evs in ranked[:limit]:
        entry = entries[eid]
        findings.append(Finding(
            id=eid, title=entry.title, score=round(min(score, 1.0) * SCALE, 3),
            evidence=tuple(Evidence(e.file, e.line, e.text, e.signature if e.signature == "cut-traceback"
                                    else "failure-line") for e in evs),
            fix=entry.fix_summary, probes=entry.probes, signatures=(), tier="possible",
        ))
    return findings
