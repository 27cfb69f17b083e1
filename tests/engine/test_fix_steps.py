"""The fix step diagnose leads with, against the step the thread's own fix was (bench/fix_steps.py's labels)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import fix_steps  # noqa: E402


@pytest.fixture(scope="module")
def figures(catalog):
    return {name: fix_steps.evaluate(name, catalog) for name in fix_steps.SETS}


def test_the_labels_are_there_and_name_real_steps(catalog):
    for name, base in fix_steps.SETS.items():
        labels = fix_steps.load_labels(name)
        assert len(labels) >= 60, name
        for label in labels:
            entry = catalog.get(label["entry"])
            assert entry is not None and entry.fix_for, label["entry"]
            assert all(1 <= step <= len(entry.fix) for step in label["steps"]), label["path"]
            assert (base / label["path"]).exists(), label["path"]


def test_a_pointed_step_is_mostly_the_threads_fix(figures):
    # measured at the end of the sixteenth session: dev 66/83, sealed 40/56
    dev, sealed = figures["dev"], figures["sealed"]
    assert dev["pointed"] >= 60 and sealed["pointed"] >= 40
    assert dev["pointed_right"] / dev["pointed"] >= 0.70
    assert sealed["pointed_right"] / sealed["pointed"] >= 0.50


def test_leading_with_the_pointed_step_beats_always_step_one_on_dev(figures):
    dev = figures["dev"]  # 69 of 89 against 39 of 89
    assert dev["first_right"] >= dev["step1_right"] + 15
