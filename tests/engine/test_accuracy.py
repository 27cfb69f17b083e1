"""The evaluation set: real logs with provenance, enough per entry, and accuracy that does not regress."""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from gpudoctor.kb.catalog import load_catalog

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "data" / "logs"
MANIFEST = yaml.safe_load((LOGS / "manifest.yaml").read_text())


def test_manifest_paths_exist_and_every_log_is_listed():
    listed = {(LOGS / case["path"]).resolve() for case in MANIFEST}
    assert all(p.exists() for p in listed)
    for path in LOGS.rglob("*"):
        if path.is_file() and path.name != "manifest.yaml":
            assert any(path.resolve() == p or p in path.resolve().parents for p in listed), path
    assert all(case.get("source") for case in MANIFEST)


def test_every_log_visible_entry_has_three_logs_and_there_are_ten_negatives():
    catalog = load_catalog(use_cache=False)
    counts = Counter(case["expect"] for case in MANIFEST)
    for entry in catalog:
        if entry.log_visibility == "shows":
            assert counts[entry.id] >= 3, entry.id
    assert counts[None] >= 10


def test_accuracy_meets_its_floor():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from accuracy import evaluate
    finally:
        sys.path.pop(0)
    result = evaluate()
    # targets: top-1 >= 90%, top-3 >= 98%, false alarms <= 10% (bench/accuracy.py prints the misses)
    assert result["top1"] >= 0.90
    assert result["top3"] >= 0.98
    assert result["false_alarms"] <= 0.10
