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


def test_a_cut_ranks_table_keeps_the_rank_that_died_among_thousands_waiting():
    from types import SimpleNamespace

    from gpudoctor.report import shown_ranks

    ranks = [SimpleNamespace(rank=i, status="died" if i == 1234 else "waiting") for i in range(5000)]
    shown = shown_ranks(ranks, 64)
    assert len(shown) == 64 and 1234 in [r.rank for r in shown]
    assert [r.rank for r in shown] == sorted(r.rank for r in shown)  # still in rank order
    assert shown_ranks(ranks[:10], 64) == ranks[:10]


def test_a_long_inputs_line_is_cut_in_its_middle_keeping_the_file_and_line_count(cli, tmp_path):
    folder = tmp_path / ("a-rather-long-directory-name-" * 3)
    folder.mkdir()
    (folder / "rank0.log").write_text("RuntimeError: Address already in use\n")
    head = cli("diagnose", str(folder / "rank0.log")).out.splitlines()[0]
    assert len(head) <= 80 and head.endswith("rank0.log (1 line)") and "…" in head, head
