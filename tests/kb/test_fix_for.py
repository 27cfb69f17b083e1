"""fix_for: validated with file and field, and every rule or witness it names exists in the engine."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpudoctor.kb.catalog import BUILTIN_DIR, build_catalog, load_catalog

from tests.kb.test_loader import GOOD, write

ROOT = Path(__file__).resolve().parents[2]
GOOD_FIX_FOR = GOOD + "fix_for:\n  - evidence: [nfs-not-responding]\n    step: 1\n"


def problems(tmp_path, text):
    path = write(tmp_path / "runbooks", "X1-nfs-stall.yaml", text)
    catalog = build_catalog([(BUILTIN_DIR, True), (tmp_path / "runbooks", False)])
    return [p for p in catalog.problems if p.startswith(str(path))], catalog


def test_a_runbook_points_its_signature_at_a_step(tmp_path):
    found, catalog = problems(tmp_path, GOOD_FIX_FOR)
    assert found == []
    [item] = catalog.get("X1").fix_for
    assert (item.evidence, item.step, item.actions) == (("nfs-not-responding",), 1, ())


@pytest.mark.parametrize("old, new, where", [
    ("[nfs-not-responding]", "[nfs-gone]", "fix_for[0].evidence[0]: unknown signature id 'nfs-gone'"),
    ("[nfs-not-responding]", "['rule:Not A Slug']", "fix_for[0].evidence[0]: 'rule:Not A Slug': expected rule:<"),
    ("[nfs-not-responding]", "[]", "fix_for[0].evidence: name at least one signature or rule"),
    ("step: 1", "step: 2", "fix_for[0].step: expected the number of one of the 1 fix steps (1-1), got 2"),
    ("step: 1", "step: first", "fix_for[0].step: expected the number"),
    ("step: 1", "actions: [reboot]", "fix_for[0].actions[0]: unknown fix action 'reboot' in this entry"),
    ("    step: 1\n", "", "fix_for[0]: give a `step`, `actions` or both"),
    ("step: 1", "step: 1\n    why: x", "fix_for[0].why: unknown field"),
])
def test_errors_name_the_file_and_field(tmp_path, old, new, where):
    assert old in GOOD_FIX_FOR.split("fix_for:")[1]
    head, tail = GOOD_FIX_FOR.split("fix_for:")
    found, catalog = problems(tmp_path, head + "fix_for:" + tail.replace(old, new))
    assert len(found) == 1 and where in found[0], found
    assert catalog.get("D8") is not None


def _engine_ids() -> set[str]:
    """The rule and witness ids the engine can put on a finding: rule:/hint: verdicts, lint slugs, probe ids."""
    ids: set[str] = set()
    for path in (ROOT / "engine").rglob("*.py"):
        text = path.read_text()
        ids |= set(re.findall(r'"((?:rule|hint):[a-z0-9-]+)"', text))
        ids |= {"script:" + s for s in re.findall(r'^\s+slug = "([a-z0-9-]+)"', text, re.M)}
        ids |= {"script:" + s for s in re.findall(r'slug="([a-z0-9-]+)"', text)}
    command = (ROOT / "engine" / "lint" / "command.py").read_text()
    ids |= {"command:" + s for s in re.findall(r'\("[A-Z]+\d+", "([a-z0-9-]+)"', command)}
    return ids


def test_every_rule_and_witness_the_catalogue_names_exists():
    known = _engine_ids()
    assert "rule:reentrant-checkpoint" in known and "script:backward-bypasses-engine" in known
    assert "command:more-ranks-than-visible-gpus" in known
    named = {(e.id, ev) for e in load_catalog(use_cache=False) for item in e.fix_for for ev in item.evidence
             if ":" in ev}
    assert named, "the built-in catalogue points no rule or witness at a fix step"
    missing = sorted(f"{eid}: {ev}" for eid, ev in named if ev not in known)
    assert not missing, f"fix_for names evidence the engine never produces: {missing}"

