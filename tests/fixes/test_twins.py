"""Every `.fixed` twin in tests/data/fixes: plan + apply gives exactly it, it parses, twice is once, stale is refused, undo is exact."""
from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
import yaml

from gpudoctor.engine.fixes import StaleFileError, plan_fix
from gpudoctor.engine.fixes.apply import apply_plan, undo_last
from gpudoctor.kb.catalog import load_catalog

DATA = Path(__file__).resolve().parent.parent / "data" / "fixes"
TWINS = sorted(p for p in DATA.glob("*/*") if p.suffix != ".fixed" and Path(str(p) + ".fixed").exists())
FACTS = {"D5": {"nproc": 4}}  # what the user would give with --param


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(use_cache=False)


def _plan(catalog, entry_id, path: Path):
    kw = {"script": str(path)} if path.suffix == ".py" else {"config": str(path)}
    return plan_fix(catalog, entry_id, facts=FACTS.get(entry_id), **kw)


def _parses(path: Path, text: str) -> None:
    if path.suffix == ".py":
        ast.parse(text)
    elif path.suffix == ".json":
        json.loads(text)
    else:
        yaml.safe_load(text)


def test_every_fix_entry_has_a_twin(catalog):
    with_file_fix = {e.id for e in catalog if any(a.kind in ("patch", "config") for a in e.fix_actions)}
    assert with_file_fix <= {p.parent.name for p in TWINS}, with_file_fix - {p.parent.name for p in TWINS}
    assert len(TWINS) >= 15


@pytest.mark.parametrize("source", TWINS, ids=[f"{p.parent.name}/{p.name}" for p in TWINS])
def test_twin(catalog, tmp_path, source):
    entry_id = source.parent.name
    work = tmp_path / source.name
    shutil.copyfile(source, work)
    original = work.read_bytes()
    expected = Path(str(source) + ".fixed").read_text(encoding="utf-8")
    state = tmp_path / "state"

    plan = _plan(catalog, entry_id, work)
    assert work.read_bytes() == original, "planning must not write"
    edits = [e for f in plan.fixes for e in f.edits]
    assert edits, plan.notes
    display_only = all(f.safety == "display-only" for f in plan.fixes if f.edits)
    if display_only:  # shown, never written
        assert edits[-1].after == expected
        result = apply_plan(plan, unsafe=True, state_dir=state)
        assert result.written == () and work.read_bytes() == original
        _parses(work, expected)
        return

    # a stale file is refused and left alone
    work.write_bytes(original + b"\n# edited after the preview\n")
    with pytest.raises(StaleFileError):
        apply_plan(plan, unsafe=True, state_dir=state)
    assert work.read_bytes() == original + b"\n# edited after the preview\n"
    work.write_bytes(original)

    result = apply_plan(plan, unsafe=True, state_dir=state)
    assert result.written == (str(work),)
    after = work.read_text(encoding="utf-8")
    assert after == expected
    _parses(work, after)

    # twice is once: the same plan again is a no-op, and a new plan finds nothing left to do
    again = apply_plan(plan, unsafe=True, state_dir=state)
    assert again.written == () and again.unchanged == (str(work),)
    replan = _plan(catalog, entry_id, work)
    assert not [e for f in replan.fixes for e in f.edits], replan.diff()
    assert work.read_text(encoding="utf-8") == expected

    undone = undo_last(state_dir=state)
    assert undone.restored == (str(work.resolve()),)
    assert work.read_bytes() == original


def test_safe_only_apply_skips_unsafe(catalog, tmp_path):
    source = DATA / "D8" / "aux_head_unused.py"
    work = tmp_path / "train.py"
    shutil.copyfile(source, work)
    plan = _plan(catalog, "D8", work)
    assert [f.safety for f in plan.fixes if f.edits] == ["unsafe"]
    result = apply_plan(plan, state_dir=tmp_path / "state")
    assert result.written == () and result.skipped == (("find-unused-parameters", "unsafe: pass --unsafe to apply it"),)
    assert work.read_bytes() == source.read_bytes()
