"""What the hyperscan database looks for: a pattern's long literals in place of a costly regex, verified by Python."""
from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import yaml

from gpudoctor.engine.diagnose import pattern_set
from gpudoctor.engine.engines import available
from gpudoctor.engine.patterns import Pattern, PatternSet, prefilter_regex
from gpudoctor.engine.scan import Scanner
from gpudoctor.kb.catalog import load_catalog

hyperscan_only = pytest.mark.skipif("hyperscan" not in available(), reason="hyperscan not installed")

CASES = Path(__file__).resolve().parents[1] / "kb" / "cases"
PROGRESS = r"\| *\d+/\d+ \[(?:29:[3-5]\d|3[0-4]:\d\d)<[^\]\n]{0,80}\] *Traceback \(most recent call last\)"


def _pattern(regex: str, literals, *, caseless: bool = False, index: int = 0) -> Pattern:
    return Pattern(index, "X1", "sig", regex, caseless, frozenset(literals) if literals is not None else None)


def test_a_regex_with_only_long_literals_is_looked_for_by_its_literals():
    from gpudoctor.engine.engine_hyperscan import hyperscan_expression

    p = _pattern(PROGRESS, {"Traceback (most recent call last)"})
    assert hyperscan_expression(p) == re.escape("Traceback (most recent call last)")
    two = _pattern(r"(?:NCCL|Process group) watchdog thread terminated|Timeout at NCCL work: \d+",
                   {"watchdog thread terminated", "Timeout at NCCL work: "})
    assert hyperscan_expression(two) == "Timeout\\ at\\ NCCL\\ work:\\ |watchdog\\ thread\\ terminated"


def test_short_literals_caseless_non_ascii_and_context_patterns_keep_their_regex():
    from gpudoctor.engine.engine_hyperscan import hyperscan_expression
    from gpudoctor.kb.model import Signature

    short = _pattern(r"\b[A-Z]\w*Error\b", {"Error"})
    assert hyperscan_expression(short) == short.regex
    none = _pattern(r"\d+ ms", None)
    assert hyperscan_expression(none) == none.regex
    folded = _pattern(r"(?i)straße wurde nicht gefunden \d+", {"straße wurde nicht gefunden "}, caseless=True)
    assert hyperscan_expression(folded) == prefilter_regex(folded.regex)
    anchored = _pattern(r"^Traceback \(most recent call last\)$", {"Traceback (most recent call last)"})
    assert hyperscan_expression(anchored) == re.escape("Traceback (most recent call last)")
    catalog = load_catalog(use_cache=False)
    context = next(p for p in pattern_set(catalog).patterns if p.single)
    assert isinstance(context.signature, Signature)
    assert hyperscan_expression(context) == prefilter_regex(context.regex)


@hyperscan_only
def test_lines_that_hold_the_literal_but_miss_the_regex_are_not_hits(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path))
    patterns = PatternSet([_pattern(PROGRESS, {"Traceback (most recent call last)"})])
    scanner = Scanner(patterns, engine="hyperscan")
    assert scanner.engine == "hyperscan"
    lines = [
        "plain Traceback (most recent call last)",  # the literal alone: a candidate, not a hit
        "  5%|#  | 57/1000 [29:41<5:12:07, 19.8s/it] Traceback (most recent call last)",  # the pattern
        "  5%|#  | 57/1000 [12:41<5:12:07, 19.8s/it] Traceback (most recent call last)",  # wrong minutes
        "nothing here",
    ]
    result = scanner.scan(io.BytesIO(("\n".join(lines) + "\n").encode()), "x.log")
    assert [h.line_no for h in result.hits[0].all()] == [2]
    assert result.lines == 4


@hyperscan_only
def test_the_shipped_catalogue_finds_the_same_lines_with_literals_as_with_regexes(monkeypatch, tmp_path):
    """Against one database of the plain regexes, on lines built to hold each long literal with and without the
    rest, and on every line of the catalogue's cases."""
    from gpudoctor.engine import engine_hyperscan

    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path))
    catalog = load_catalog(use_cache=False)
    swapped = [p for p in pattern_set(catalog).patterns
               if engine_hyperscan.hyperscan_expression(p) != prefilter_regex(p.regex)]
    assert len(swapped) >= 50  # most signatures have a long literal (124 of 196 when written)
    lines = []
    for p in swapped:
        for lit in sorted(p.literals):
            lines += [f"[rank1]: {lit}", f"x {lit} y", f"{lit}: 1800000 ms on 172.17.0.2 port 29500"]
    for path in sorted(CASES.glob("*.yaml")):  # every hit and near-miss case of the catalogue
        for case in (yaml.safe_load(path.read_text()) or {}).values():
            if isinstance(case, dict) and isinstance(case.get("log"), str):
                lines += case["log"].splitlines()
    data = ("\n".join(lines) + "\n").encode()
    literal_scan = Scanner(pattern_set(catalog), engine="hyperscan").scan(io.BytesIO(data), "a.log")
    monkeypatch.setattr(engine_hyperscan, "hyperscan_expression", lambda p: prefilter_regex(p.regex))
    monkeypatch.setattr(engine_hyperscan, "OWN_DATABASE", frozenset())  # and one database of every pattern
    fresh = PatternSet(list(pattern_set(catalog).patterns))
    regex_scan = Scanner(fresh, engine="hyperscan").scan(io.BytesIO(data), "a.log")

    def hits(scan):
        return {i: (h.count, [(x.line_no, x.text) for x in h.all()]) for i, h in scan.hits.items()}

    assert len(regex_scan.hits) >= 100  # the cases fire most of the catalogue
    assert hits(literal_scan) == hits(regex_scan)
    assert literal_scan.lines == regex_scan.lines == len(lines)


@hyperscan_only
def test_the_distributed_context_pattern_is_scanned_apart_and_still_reported_once_per_block(monkeypatch, tmp_path):
    from gpudoctor.engine.engine_hyperscan import HyperscanMatcher

    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path))
    patterns = pattern_set(load_catalog(use_cache=False))
    matcher = HyperscanMatcher.build(patterns)
    assert len(matcher.apart) == 1
    context = next(p.index for p in patterns.patterns if (p.owner, p.name) == ("D3", "distributed-context"))
    watchdog = next(p.index for p in patterns.patterns if p.name == "watchdog")
    line = ("[rank3]:[E1122 01:58:03.026000 8038 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=57, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800093 ms")
    noise = "gpu-node-063:40956:30345 [3] NCCL INFO Channel 00/32 :    0   1   2   3"
    block = ("\n".join([noise] * 50 + [line] + [noise] * 50) + "\n").encode()
    found = matcher.candidates(block, len(block))
    with_context = [start for start, (indexes, _at) in found.items() if context in indexes]
    assert with_context == [0]  # the first NCCL line only: a context pattern is reported once per block
    at_watchdog = block.index(line.encode())
    indexes, at = found[at_watchdog]
    assert watchdog in indexes and at_watchdog < at <= at_watchdog + len(line)
    scan = Scanner(patterns, engine="hyperscan").scan(io.BytesIO(block), "r.log")
    assert [h.line_no for h in scan.hits[context].all()] == [1]
    assert [h.line_no for h in scan.hits[watchdog].all()] == [51]


@hyperscan_only
def test_a_catalogue_without_the_context_pattern_gets_one_database(monkeypatch, tmp_path):
    from gpudoctor.engine.engine_hyperscan import HyperscanMatcher

    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path))
    patterns = PatternSet([_pattern(PROGRESS, {"Traceback (most recent call last)"}),
                           _pattern(r"NCCL WARN \w+", {"NCCL WARN "}, index=1)])
    matcher = HyperscanMatcher.build(patterns)
    assert matcher.apart == ()
    block = b"x NCCL WARN boom\n"
    assert matcher.candidates(block, len(block)) == {0: ({1}, 13)}  # hyperscan reports the first end: "...WARN b"


def test_a_head_of_classes_before_a_top_level_any_run_is_cut_for_the_compiled_engine():
    from gpudoctor.engine.engine_hyperscan import _after_any_run

    assert _after_any_run(r"\s*\d+\??: +\S.*\bpmtu 1[2-5]\d\d\b") == r"\bpmtu 1[2-5]\d\d\b"
    assert _after_any_run(r"(?i)\d+ ranks.*timed out waiting") == "(?i)timed out waiting"
    # not a superset, or no longer rare: left whole
    assert _after_any_run(r"a|b.*cdef") is None  # a top-level alternative
    assert _after_any_run(r"x(a.*b)cdef") is None  # the run is inside a group
    assert _after_any_run(r"[.*]xyzw") is None  # a class, not a run
    assert _after_any_run(r"\d+.*ab") is None  # the tail's literal is too short to search for alone


@hyperscan_only
def test_old_databases_are_removed_when_a_new_one_is_written(monkeypatch, tmp_path):
    import os

    from gpudoctor.engine import engine_hyperscan

    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(engine_hyperscan, "KEEP_DBS", 3)
    for n in range(5):  # databases of five older catalogues, oldest first
        old = tmp_path / f"hyperscan-old{n}.db"
        old.write_bytes(b"x")
        os.utime(old, ns=(10**18 + n, 10**18 + n))
    (tmp_path / "catalog-1234.pickle").write_bytes(b"y")  # not a database: never touched
    scanner = Scanner(PatternSet([_pattern(r"ab+c", None)]), engine="hyperscan")
    assert scanner.scan(io.BytesIO(b"xabbc\n"), "x.log").hits[0].all()[0].line_no == 1
    left = sorted(p.name for p in tmp_path.iterdir())
    assert "catalog-1234.pickle" in left and "hyperscan-old4.db" in left and "hyperscan-old3.db" in left
    assert not {"hyperscan-old0.db", "hyperscan-old1.db", "hyperscan-old2.db"} & set(left)
    assert len([p for p in left if p.startswith("hyperscan-")]) == 3
