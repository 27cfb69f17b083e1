"""Per-entry diagnose cases: every `hit_*` log ranks its entry first citing the given lines; no `miss_*` log reports it."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpudoctor.engine.diagnose import diagnose
from gpudoctor.engine.sources import resolve
from gpudoctor.kb.catalog import load_catalog

CASES_DIR = Path(__file__).resolve().parent / "cases"
CASE_KEYS = {"source", "log", "cites", "xfail"}


def _load_cases() -> dict[str, dict[str, dict]]:
    cases = {}
    for path in sorted(CASES_DIR.glob("*.yaml")):
        cases[path.stem] = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return cases


CASES = _load_cases()
PAIRS = [(eid, name) for eid, entry_cases in CASES.items() for name in entry_cases]


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(use_cache=False)


def _diagnose(catalog, tmp_path: Path, text: str):
    path = tmp_path / "case.log"
    path.write_text(text, encoding="utf-8")
    return diagnose(catalog, resolve([str(path)]))


def _problem(catalog, tmp_path: Path, entry_id: str, name: str, case: dict) -> str | None:
    """What is wrong with the engine's answer for this case, or None when it is right."""
    # possible causes (tier "possible") are guesses kept apart from the findings these cases are about
    findings = [f for f in _diagnose(catalog, tmp_path, case["log"]).findings if getattr(f, "tier", "match") == "match"]
    ids = [f.id for f in findings]
    if name.startswith("hit_"):
        if not ids or ids[0] != entry_id:
            return f"expected {entry_id} first, got {ids}"
        cited = {e.line for e in findings[0].evidence}
        missing = [line for line in case["cites"] if line not in cited]
        if missing:
            return f"lines {missing} not in {entry_id}'s evidence lines {sorted(cited)}"
        return None
    if entry_id in ids:
        return f"{entry_id} reported on a near-miss: {ids}"
    return None


@pytest.mark.parametrize(("entry_id", "name"), PAIRS, ids=[f"{e}-{n}" for e, n in PAIRS])
def test_case(catalog, tmp_path, entry_id, name):
    case = CASES[entry_id][name]
    problem = _problem(catalog, tmp_path, entry_id, name, case)
    if case.get("xfail"):
        if problem is None:  # strict: a fixed signature must take its xfail mark with it
            pytest.fail(f"XPASS {entry_id}.{name}: the engine now gets this case right; remove its xfail")
        pytest.xfail(f"{problem} -- {case['xfail']}")
    assert problem is None, problem


# --- meta-tests ---------------------------------------------------------------------------------


def test_every_entry_has_a_cases_file(catalog):
    assert sorted(CASES) == sorted(e.id for e in catalog)


def test_cases_cover_each_entry_by_its_visibility(catalog):
    for entry in catalog:
        names = list(CASES.get(entry.id, {}))
        hits = [n for n in names if n.startswith("hit_")]
        misses = [n for n in names if n.startswith("miss_")]
        if entry.log_visibility == "shows":
            assert len(hits) >= 2 and len(misses) >= 1, (entry.id, names)
        else:
            assert not hits, f"{entry.id} never shows in a log, yet has hit cases {hits}"
            assert len(misses) >= 1, (entry.id, names)


@pytest.mark.parametrize("entry_id", sorted(CASES))
def test_case_files_are_well_formed(entry_id):
    for name, case in CASES[entry_id].items():
        assert name.startswith(("hit_", "miss_")), f"{entry_id}: case {name!r} must start with hit_ or miss_"
        assert isinstance(case, dict) and set(case) <= CASE_KEYS, (entry_id, name, sorted(case))
        assert case.get("source"), f"{entry_id}.{name}: no source"
        lines = case["log"].splitlines()
        assert lines, f"{entry_id}.{name}: empty log"
        if name.startswith("hit_"):
            assert 5 <= len(lines) <= 40, f"{entry_id}.{name}: {len(lines)} lines, keep a hit to 5-40"
            cites = case.get("cites")
            assert cites, f"{entry_id}.{name}: a hit cites at least one line"
            assert all(isinstance(n, int) and 1 <= n <= len(lines) for n in cites), (entry_id, name, cites)
        else:
            assert "cites" not in case, f"{entry_id}.{name}: a miss cites nothing"
