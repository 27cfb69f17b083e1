"""Every installed multi-pattern engine gives the same findings, with the same evidence, on the real logs."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpudoctor.engine.diagnose import diagnose
from gpudoctor.engine.engines import available, make_matcher
from gpudoctor.engine.sources import resolve
from gpudoctor.kb.catalog import load_catalog

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
CASES = [c["path"] for c in yaml.safe_load((LOGS / "manifest.yaml").read_text())]


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(use_cache=False)


def _summary(result) -> list:
    return [(f.id, round(f.score, 6), sorted((e.file, e.line) for e in f.evidence)) for f in result.findings]


def test_named_engines_are_the_ones_that_run(catalog):
    from gpudoctor.engine.diagnose import pattern_set

    for engine in available():
        assert make_matcher(pattern_set(catalog), engine).name == engine


@pytest.mark.parametrize("case", CASES)
def test_every_engine_gives_the_same_findings_on_real_logs(catalog, case):
    engines = available()
    assert len(engines) >= 2, f"only {engines} installed: nothing to compare"
    results = {}
    for engine in engines:
        result = diagnose(catalog, resolve([str(LOGS / case)]), engine=engine)
        assert result.engine == engine
        results[engine] = _summary(result)
    reference = results[engines[0]]
    for engine, summary in results.items():
        assert summary == reference, f"{engine} differs from {engines[0]}"


def _hits(catalog, case: str, engine: str, singles: bool = True) -> list:
    """What the scan of each file of a real log found: every pattern's count and kept lines (with
    singles=False, not the context patterns': hyperscan's single-match mode reports the first line
    its prefilter matches, re2 and python the first line that the pattern really matches)."""
    from gpudoctor.engine.diagnose import pattern_set
    from gpudoctor.engine.scan import Scanner
    from gpudoctor.engine.sources import open_source

    scanner = Scanner(pattern_set(catalog), engine=engine)
    found = []
    for source in resolve([str(LOGS / case)]):
        if source.flight:
            continue
        result = scanner.scan(open_source(source, None), source.name)
        found.append(sorted((i, h.count, [(x.line_no, x.text) for x in h.all()]) for i, h in result.hits.items()
                            if singles or not scanner.patterns.patterns[i].single))
    return found


def _reference_engine() -> tuple[str, bool]:
    """(the compiled engine to compare the Python one with, whether the context patterns are compared)"""
    return ("re2", True) if "re2" in available() else (available()[0], False)


@pytest.fixture(scope="module")
def reference(catalog):
    """Each real log's scan by a compiled engine (the test above fails where there is none), once."""
    engine, singles = _reference_engine()
    return {case: _hits(catalog, case, engine, singles) for case in CASES}


# The pure-Python engine's paths for big blocks (line shapes, anchors, a literal on nearly every line),
# forced on the real logs, which are small: each must find what the compiled engine finds, line for line.
PATHS = {
    "shapes": {"SHAPES_FROM": 0},  # as for every log of 4 KB or more
    "no shapes": {"SHAPES_FROM": 1 << 40},
    "anchors": {"ANCHOR_FROM": 0, "shapes": False},
    "common literals": {"SHAPES_FROM": 0, "COMMON_LITERAL": 1},
    "common, anchors": {"ANCHOR_FROM": 0, "COMMON_LITERAL": 1, "shapes": False},
}


@pytest.mark.parametrize("path", PATHS)
def test_python_engine_big_block_paths_give_the_same_findings(catalog, reference, monkeypatch, path):
    from gpudoctor.engine import engine_python
    from gpudoctor.engine.shapes import Shapes

    if available()[0] == "python":
        pytest.fail("no compiled engine installed: nothing to compare with")
    for name, value in PATHS[path].items():
        if name == "shapes":
            monkeypatch.setattr(Shapes, "of", classmethod(lambda cls, block, end: None))
        else:
            monkeypatch.setattr(engine_python, name, value)
    engine, singles = _reference_engine()
    differ = [case for case in CASES if _hits(catalog, case, "python", singles) != reference[case]]
    assert not differ, f"python ({path}) differs from {engine} on {differ[:5]}"


def test_a_match_that_runs_on_through_trailing_newlines_keeps_its_line_on_every_engine(catalog):
    """A regex ending in \\s*$ at the end of a block (whose last bytes are newlines) may run on to the block's end,
    where $ holds: the hit still belongs to the line the match started on, not to the blank line after it
    (re2's finditer attributed it to the blank line and lost it; found by the randomised engine test)."""
    import io

    from gpudoctor.engine.diagnose import pattern_set
    from gpudoctor.engine.scan import Scanner

    patterns = pattern_set(catalog)
    watchdog = next(p.index for p in patterns.patterns if p.owner == "MN3" and p.name == "watchdog-timeout")
    data = ("\n\nWatchdog caught collective operation timeout" * 3).encode()
    lines = {}
    for engine in available():
        hits = Scanner(patterns, engine=engine).scan(io.BytesIO(data), "m.log").hits
        lines[engine] = [h.line_no for h in hits[watchdog].all()] if watchdog in hits else []
    assert all(found == [3, 5, 7] for found in lines.values()), lines
