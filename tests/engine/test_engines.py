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


def test_python_engine_gates_and_covers_are_sound(catalog):
    import re

    from gpudoctor.engine.covers import covers
    from gpudoctor.engine.diagnose import pattern_set
    from gpudoctor.engine.engine_python import PythonMatcher

    patterns = pattern_set(catalog)
    matcher = PythonMatcher(patterns)
    for table in matcher._make_gates():
        for literal, gate in table.items():
            assert gate in literal  # a gate absent from a block rules out only literals that contain it
    # every cover of every pattern: each real match of the pattern contains one of the cover's strings
    samples = [h for case in CASES[:40] for h in (LOGS / case).rglob("*") if h.is_file()] + \
              [LOGS / c for c in CASES[:40] if (LOGS / c).is_file()]
    text = "\n".join(p.read_text(errors="replace") for p in samples[:60])
    for p in patterns.patterns:
        options = covers(p.regex, p.caseless)
        regex = re.compile(p.regex, re.IGNORECASE if p.caseless else 0)
        for line in text.splitlines():
            m = regex.search(line)
            if m is None:
                continue
            hay = line.lower() if p.caseless else line
            for cover in options:
                assert any(s in hay for s in cover), (p.name, sorted(cover), line[:200])
