"""Diagnose a failed run: scan every source, score catalogue entries, follow the ranks, read flight dumps."""
from __future__ import annotations

from gpudoctor.engine.columns import as_printed
from gpudoctor.engine.findings import Finding, SignatureHits, build_findings
from gpudoctor.engine.patterns import STRUCT, PatternSet
from gpudoctor.engine.scan import Hit, Scanner, SourceScan
from gpudoctor.engine.sources import InputError, Source, open_source
from gpudoctor.engine.stacks import looks_like_dump
from gpudoctor.kb.record import field, record, replace

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing typing costs every run start-up time
    from typing import BinaryIO, Callable

SCHEMA = "gpudoctor.diagnosis/2"
HYPERSCAN_FROM_BYTES = 8 << 20
CAPTURE_TOTAL = 16 << 20  # characters of small inputs kept whole for rules and possible causes


@record
class InputSummary:
    name: str
    bytes: int
    lines: int
    kind: str  # "log" or "flight"
    binary: bool = False
    cut_lines: int = 0
    problem: str | None = None  # set when the source could be read only in part
    huge_lines: bool = False  # lines of 512 KiB or more


@record(frozen=True)
class Diagnosis:
    findings: list[Finding]
    ranks: list  # list[gpudoctor.engine.ranks.RankReport]
    verdict: list[str]  # plain sentences: which rank died or fell behind first
    inputs: list[InputSummary]
    engine: str  # "hyperscan", "re2" or "python"
    flight: object | None = None  # gpudoctor.engine.flight.FlightReport
    notes: list[str] = field(default_factory=list)
    probe_results: dict = field(default_factory=dict)  # entry id -> [probes Result], with --probe

    def top(self, n: int) -> "Diagnosis":
        """A copy that keeps the n best confident findings and, apart from them, the n best possible causes."""
        matches = [f for f in self.findings if f.tier == "match"][:n]
        possible = [f for f in self.findings if f.tier != "match"][:n]
        return replace(self, findings=matches + possible)

    def with_probe_results(self, results: dict) -> "Diagnosis":
        return replace(self, probe_results=dict(results))


def pattern_set(catalog) -> PatternSet:
    """The catalogue's pattern set, built once per catalogue object and kept on it (never pickled)."""
    return catalog.derived("patterns", PatternSet.from_entries)


def wants_rank_tail(source: Source, several: bool) -> bool:
    """Whether each rank's last line is worth finding in this source: not in a per-rank file among several whose
    name gives its rank (engine/ranks.py reads that file's own last line instead)."""
    return not (several and (source.rank_hint is not None or source.local_rank_hint is not None))


def diagnose(
    catalog,
    sources: list[Source],
    *,
    stdin: BinaryIO | None = None,
    use_hyperscan: bool = True,
    engine: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> Diagnosis:
    """Scan the sources and explain them. Raises InputError for a source that cannot be opened at all."""
    from gpudoctor.engine.ranks import RankAnalysis

    patterns = pattern_set(catalog)
    # for a few MB the literal prefilter is faster than loading hyperscan; stdin may be any size
    known = [s.size for s in sources]
    small = all(size is not None for size in known) and sum(known) < HYPERSCAN_FROM_BYTES
    # a pipe's size is known once its first 64 KiB are read (scan.py): a pasted line needs no hyperscan database
    deferred = any(size is None for size in known)
    scanner = Scanner(patterns, use_hyperscan=use_hyperscan and not small, engine=engine,
                      big_from=HYPERSCAN_FROM_BYTES if deferred else None)
    scans: list[tuple[Source, SourceScan]] = []
    inputs: list[InputSummary] = []
    dumps = []
    logs = [s for s in sources if not s.flight]
    analysis = RankAnalysis(patterns, len(logs) > 1)
    done: dict[int, SourceScan] = {}
    dumps_text: dict[str, tuple[str, int | None]] = {}  # sources that held py-spy / faulthandler stack dumps
    texts: dict[str, str] = {}  # the whole text of small sources, for the possible tier's failure lines
    budget = CAPTURE_TOTAL
    if not small and all(s.path is not None for s in logs):  # a pipe is read here, by one process
        from gpudoctor.engine.parallel import scan_parallel

        # the rank reading of each finished source overlaps the workers' scanning of the rest
        results = scan_parallel(scanner, logs, progress, lambda i, scan: analysis.add(logs[i], scan),
                                [wants_rank_tail(s, len(logs) > 1) for s in logs])
        if results is not None:
            done = {id(s): r for s, r in zip(logs, results)}
        else:
            analysis = RankAnalysis(patterns, len(logs) > 1)  # a failed pool may have fed it a few
    for source in sources:
        if source.flight:
            dumps.append(_load_dump(source))
            inputs.append(InputSummary(source.name, source.size or 0, 0, "flight"))
            continue
        if id(source) in done:
            result = done[id(source)]
            scans.append((source, result))
            inputs.append(InputSummary(source.name, result.bytes, result.lines, "log", result.binary, result.cut_lines,
                                       result.problem, result.huge_lines))
            continue
        try:
            stream = open_source(source, stdin)
        except InputError as exc:  # vanished or unreadable since it was listed: named, and the rest are read
            inputs.append(InputSummary(source.name, 0, 0, "log", problem=str(exc)))
            continue
        capture = _Capture(stream)
        try:  # reading never raises: a truncated archive or a read error ends the stream (result.problem)
            result = scanner.scan(capture, source.name, progress, None if source.compressed else source.size,
                                  wants_rank_tail(source, len(logs) > 1))
        finally:
            if source.path is not None:
                stream.close()
        problem = result.problem
        scans.append((source, result))
        text = capture.text(budget)
        if text is not None:
            budget -= len(text)
            text = texts[source.name] = as_printed(text)
            if looks_like_dump(text):
                dumps_text[source.name] = (text, _hint_of(source, len(logs) > 1))
        analysis.add(source, result)
        inputs.append(InputSummary(source.name, result.bytes, result.lines, "log", result.binary, result.cut_lines, problem,
                                   result.huge_lines))

    matched: dict[str, dict[str, SignatureHits]] = {}
    for _source, result in scans:
        for index, hits in result.hits.items():
            pattern = patterns.patterns[index]
            if pattern.owner == STRUCT:
                continue
            sh = matched.setdefault(pattern.owner, {}).setdefault(pattern.name, SignatureHits())
            sh.count += hits.count
            sh.lines.extend((result.name, h) for h in hits.all())
    flight_report = None
    if dumps:
        from gpudoctor.engine.flight import analyze

        flight_report = analyze(dumps)
    ranks, verdict, signals = analysis.finish(flight_report)
    if dumps_text:  # a stack dump's last line is `<module>`: show where the user's code stopped, and in what
        from gpudoctor.engine.hangs import stopped_at

        where = stopped_at(dumps_text)
        for r in ranks:
            if r.rank in where and r.first_error is None:
                r.last_line, place = where[r.rank]
                r.blocked_in = r.blocked_in or place
    if flight_report is not None:
        _flight_signals(flight_report, [s.name for s in sources if s.flight], signals, verdict, ranks)
    entries = {e.id: e for e in catalog}

    def add_signal(name: str) -> None:
        for entry in entries.values():
            for sig in entry.signatures:
                if sig.derived == name and signals.get(name):
                    sh = matched.setdefault(entry.id, {}).setdefault(sig.id, SignatureHits())
                    sh.count += len(signals[name])
                    sh.lines.extend(signals[name])

    for name in signals:
        if name != "rank-failed-first":
            add_signal(name)
    # a rank that failed first for a reason another entry already names (D8, D23, ...) is that entry's case
    owners = {e.id for e in entries.values() if any(s.derived == "rank-failed-first" for s in e.signatures)}
    named = build_findings({k: v for k, v in entries.items() if k not in owners}, matched)
    explained = {(ev.file, ev.line) for f in named for ev in f.evidence}
    if not all((f, h.line_no) in explained for f, h in signals.get("rank-failed-first", [])):
        add_signal("rank-failed-first")
    findings = build_findings(entries, matched)
    weak = _weak_signatures(entries, matched, {f.id for f in findings})
    from gpudoctor.engine.fix_pointer import point
    from gpudoctor.engine.rules import annotate, evaluate, merge

    verdicts = evaluate(scans, texts, dumps_text)
    findings, rule_notes = merge(entries, findings, verdicts)
    # an entry the structure rules out stays out unless a rule confirms it; a possible-tier hint does not bring it back
    confirmed = {v.entry for v in verdicts if not v.rule_out and v.tier == "match"}
    ruled_out = {v.entry for v in verdicts if v.rule_out} - confirmed
    hints = [v for v in verdicts if v.tier == "possible" and v.entry not in ruled_out]
    finished: list[str] = []
    findings += _possible(catalog, scans, patterns, findings, ruled_out, texts, hints, weak, finished)
    findings = point(entries, annotate(findings))
    notes = rule_notes + finished + [i.problem for i in inputs if i.problem]
    notes += [f"{i.name}: {i.cut_lines} line(s) over 1 MiB were scanned in pieces" for i in inputs if i.cut_lines]
    notes += [f"{i.name}: binary data (NUL bytes) was read as text" for i in inputs if i.binary]
    notes += [f"{i.name}: holds lines of 512 KiB or more; evidence from them is the text around each match"
              for i in inputs if i.huge_lines and not i.cut_lines]
    return Diagnosis(findings, ranks, verdict, inputs, scanner.engine, flight_report, notes)


class _Capture:
    """A read-through wrapper that keeps a small input's text when it holds stack dumps (py-spy, faulthandler)."""

    LIMIT = 4 << 20

    def __init__(self, stream):
        self.stream, self.parts, self.size, self.over = stream, [], 0, False

    def read(self, n: int = -1) -> bytes:
        data = self.stream.read(n)
        if data and not self.over:
            self.size += len(data)
            if self.size > self.LIMIT:
                self.over, self.parts = True, []
            else:
                self.parts.append(bytes(data))
        return data

    def readinto(self, buffer) -> int:
        inner = getattr(self.stream, "readinto", None)
        if inner is None:
            view = memoryview(buffer)
            data = self.read(len(view))
            view[: len(data)] = data
            return len(data)
        n = inner(buffer) or 0
        if n and not self.over:
            self.size += n
            if self.size > self.LIMIT:
                self.over, self.parts = True, []
            else:
                self.parts.append(bytes(memoryview(buffer)[:n]))
        return n

    def __getattr__(self, name):
        return getattr(self.stream, name)

    def text(self, budget: int) -> str | None:
        if self.over or not self.parts or self.size > budget:
            return None
        return b"".join(self.parts).decode("utf-8", "replace")


def _hint_of(source: Source, per_rank_files: bool) -> int | None:
    if not per_rank_files:
        return None
    return source.rank_hint if source.rank_hint is not None else source.local_rank_hint


def _weak_signatures(entries: dict, matched: dict, reported: set[str]) -> dict:
    """Entries whose signatures fired too weakly to report: id -> (score, evidence), for the possible tier."""
    from gpudoctor.engine.findings import Evidence, score_entry

    weak = {}
    for eid, sigs in matched.items():
        entry = entries.get(eid)
        if entry is None or eid in reported:
            continue
        score, used = score_entry(entry, sigs)
        if score > 0:
            lines = [Evidence(f, h.line_no, h.text, sid) for sid in used for f, h in sigs[sid].lines[:1]]
            weak[eid] = (score, tuple(lines))
    return weak


def _possible(catalog, scans, patterns, findings: list[Finding], ruled_out: set[str], texts: dict,
              hints: list, weak: dict, notes: list[str]) -> list[Finding]:
    """Possible causes for a log that shows a failure: word guesses only when nothing matched; beside a match, only
    what the log's structure hints at (an OOM raised under ZeRO)."""
    from gpudoctor.engine.failure_lines import failure_lines
    from gpudoctor.engine.possible import LIMIT, LIMIT_BESIDE_MATCH, possible_findings

    entries = {e.id: e for e in catalog}
    matched = {f.id for f in findings} | ruled_out
    hinted: list[Finding] = []
    for v in hints:  # what the context makes likely (an OOM under ZeRO) comes before word matches
        entry = entries.get(v.entry)
        if entry is not None and v.entry not in matched and all(h.id != v.entry for h in hinted):
            hinted.append(Finding(id=entry.id, title=entry.title, score=v.score, evidence=v.evidence,
                                  fix=entry.fix_summary, probes=entry.probes, signatures=(v.rule,), tier="possible"))
    # beside a confident finding, word guesses only for a pasted error of a line or two (every entry that owns
    # those words is a candidate); on a real log they add nothing to the top three and only distract (and reading
    # the failure lines of a thousand per-rank logs costs a tenth of the run)
    if findings and sum(s.lines for _src, s in scans) > PASTE_LINES:
        return hinted[:LIMIT_BESIDE_MATCH]
    lines = failure_lines(scans, patterns, texts)
    if not lines and not findings:  # no failure at all: what the structure hints at, then what the content reads like
        from gpudoctor.engine.context_guess import context_findings

        from gpudoctor.engine.stacks import is_pyspy_dump

        readable = {s.name: texts[s.name] for s, scan in scans
                    if s.name in texts and not scan.binary and not is_pyspy_dump(texts[s.name])}
        from gpudoctor.engine.launch_rules import run_finished, stopped_by_hand

        if any(stopped_by_hand(text) for text in readable.values()):
            return hinted  # a run stopped with Ctrl-C that printed no failure: its launch reads like nothing

        done = next(((name, at) for name, text in readable.items() for at in [run_finished(text)] if at), None)
        if done is not None:  # a run that says it finished, with no failure line: nothing to guess at
            name, (line_no, line) = done
            notes.append(f"{name} line {line_no}: the run finished (\"{line[:80]}\"), and no line shows a failure: "
                         "nothing here to explain")
            return hinted
        return (hinted + context_findings(catalog, readable, matched | {h.id for h in hinted}))[:LIMIT]
    if not lines and not hinted:
        return []  # a weak signature alone, with no failure in sight, is no reason to guess
    matched |= {h.id for h in hinted}
    if findings:
        found = [f for f in possible_findings(catalog, lines, matched, LIMIT_BESIDE_MATCH) if f.score >= STRONG_POSSIBLE]
        return (hinted + found)[:LIMIT_BESIDE_MATCH]
    found = possible_findings(catalog, lines, matched, LIMIT, weak) if lines else []
    return (hinted + found)[:LIMIT]


PASTE_LINES = 3  # an input this short is a pasted error line, not a log
STRONG_POSSIBLE = 0.5  # beside a confident finding, only a failure line that reads like the entry's own words


def _flight_signals(report, dump_names: list[str], signals: dict, verdict: list[str], ranks: list) -> None:
    """What the flight recorder proves, as derived signals (evidence line 0: a dump has no lines)."""
    where = dump_names[0] if len(dump_names) == 1 else f"{len(dump_names)} flight-recorder dumps"
    by_rank = {r.rank: r for r in ranks}
    for group in report.groups:
        inc = group.first_incomplete
        pg = f"pg {group.pg_name}" + (f" ({group.pg_desc})" if group.pg_desc else "")
        if inc is not None and inc.missing:
            text = (f"{inc.op} #{inc.seq} on {pg}: joined by ranks "
                    f"{', '.join(map(str, inc.joined))}, never by {', '.join(map(str, inc.missing))}")
            signals.setdefault("collective-not-joined", []).append((where, Hit(0, text)))
            for rank in inc.missing:
                if rank in by_rank:
                    by_rank[rank].status = "behind"
        for mm in group.mismatches:
            for rank in mm.odd_ranks:
                if rank in by_rank:
                    by_rank[rank].status = "desync"
            values = "; ".join(f"{v.value} on ranks {', '.join(map(str, v.ranks))}" for v in mm.values)
            text = f"{mm.op} #{mm.seq}: {mm.field} differ: {values}"
            signals.setdefault("collective-mismatch", []).append((where, Hit(0, text)))
    if report.summary and not report.healthy:
        verdict.insert(0, "flight recorder: " + report.summary)


def _load_dump(source: Source):
    from gpudoctor.engine.flight import FlightError, load_dump

    try:
        return load_dump(source.path)
    except FlightError as exc:
        raise InputError(str(exc)) from None
