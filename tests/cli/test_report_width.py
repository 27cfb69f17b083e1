"""Every diagnosis of every development log reads in 80 columns: findings, guesses, evidence, ranks, notes, hints."""
from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from gpudoctor.engine.diagnose import diagnose
from gpudoctor.engine.sources import resolve
from gpudoctor.kb.catalog import load_catalog
from gpudoctor.report import render_text
from gpudoctor.term import Out

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"


def _paths() -> list[Path]:
    out = []
    for manifest in sorted(LOGS.glob("manifest*.yaml")):
        out += [LOGS / case["path"] for case in yaml.safe_load(manifest.read_text()) or []]
    return out


@pytest.mark.parametrize("width", [80, 100])
def test_no_line_of_any_text_report_is_wider_than_the_terminal(width):
    catalog = load_catalog()
    wide = []
    for path in _paths():
        stream = io.StringIO()
        render_text(diagnose(catalog, resolve([str(path)])), Out(stream, False, width), catalog)
        wide += [(path.name, len(line), line) for line in stream.getvalue().splitlines() if len(line) > width]
    assert not wide, wide[:5]
