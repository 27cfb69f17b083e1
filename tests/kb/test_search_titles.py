"""Search ranks the right entry for real issue titles (tests/kb/search_titles.yaml), held-out ones included."""
from pathlib import Path

import pytest
import yaml

from gpudoctor.kb.catalog import load_catalog

TITLES = yaml.safe_load((Path(__file__).parent / "search_titles.yaml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def ranked():
    index = load_catalog(use_cache=False).search_index()
    return [(expect, split, [h.id for h in index.search(title, limit=3)]) for title, expect, _, split in TITLES]


def test_the_set_is_real_and_large_enough():
    assert len(TITLES) >= 140
    assert len({url for _, _, url, _ in TITLES}) == len(TITLES)  # one title per thread
    assert all(url.startswith("https://") for _, _, url, _ in TITLES)
    assert {split for *_, split in TITLES} == {"tune", "tune3", "held", "held2"}
    assert sum(split == "held2" for *_, split in TITLES) >= 40
    assert len({expect for _, expect, _, _ in TITLES}) >= 25  # most of the catalogue is asked about


def _rate(rows, k):
    return sum(expect in got[:k] for expect, _, got in rows) / len(rows)


def _split(ranked, *names):
    return [r for r in ranked if r[1] in names]


def test_most_titles_rank_their_entry_first(ranked):
    # measured 92% (tune 97%, held 85%) on the first 100 titles; the floors sit well under it
    assert _rate(_split(ranked, "tune", "held"), 1) >= 0.82
    assert _rate(_split(ranked, "held"), 1) >= 0.72


def test_nearly_all_titles_have_their_entry_in_the_top_three(ranked):
    assert _rate(_split(ranked, "tune", "held"), 3) >= 0.95  # measured 100%


def test_second_held_set_generalises(ranked):
    # 'held2' (48 titles collected after search was written, never used to tune it): measured before the
    # search changes of 2026-11-24 at top-1 79%, top-3 83% (bench/search_accuracy.py); the floors sit well under
    held2 = _split(ranked, "held2")
    assert _rate(held2, 1) >= 0.65
    assert _rate(held2, 3) >= 0.70


def test_third_held_set_is_measured_and_keeps_a_floor():
    # 'held3' (66 titles, 2026-11-27, threads in no other set, labelled from their resolutions by a collector that
    # never ran search): measured once on arrival at top-1 57.6%, top-3 77.3%; the floors sit well under
    held3 = yaml.safe_load((Path(__file__).parent / "search_titles_held3.yaml").read_text(encoding="utf-8"))
    assert len(held3) >= 60 and {split for *_, split in held3} == {"held3"}
    assert not {url for _, _, url, _ in held3} & {url for _, _, url, _ in TITLES}
    index = load_catalog(use_cache=False).search_index()
    rows = [(expect, split, [h.id for h in index.search(title, limit=3)]) for title, expect, _, split in held3]
    assert _rate(rows, 1) >= 0.45
    assert _rate(rows, 3) >= 0.65


@pytest.mark.parametrize("split, floors", [
    # both collected 2026-11-27 (session 10) by two collectors that never ran search, from threads in no other set;
    # 'tune4' was measured once on arrival and then used for tuning (CJK words, a few keywords and paraphrases),
    # 'held4' was held out. On arrival: tune4 45.0% / 63.3%, held4 43.8% / 75.0% (top-1 / top-3); held4 became
    # 'tune5' in session 13 (46.9% / 75.0% before its misses were read, 64.1% / 82.8% after the changes for them)
    ("tune4", (0.38, 0.55)),
    ("tune5", (0.50, 0.70)),
    # collected 2026-11-28 (session 13) by a collector that never ran search; measured once on arrival at 53.7% /
    # 71.6% (the search of the session before gave it 52.2% / 68.7%); held out as 'held5' until session 14, then
    # used for tuning as 'tune6' (62.7% / 79.1% after the changes for its misses)
    ("tune6", (0.50, 0.68)),
    # collected 2026-11-28 (session 14) by a collector that never ran search; measured once on arrival at 54.7% /
    # 78.1% (the search at the start of that session gave it 53.1% / 78.1%); held out as 'held6' until session 15,
    # then used for tuning as 'tune7'
    ("tune7", (0.42, 0.65)),
    # collected 2026-11-28 (session 15) by a collector that never ran search; measured once on arrival at 65.1% /
    # 73.0% (the search at the start of that session gave it 61.9% / 73.0%); held out
    ("held7", (0.50, 0.60)),
])
def test_the_fourth_sets_are_measured_and_keep_a_floor(split, floors):
    rows_in = yaml.safe_load((Path(__file__).parent / f"search_titles_{split}.yaml").read_text(encoding="utf-8"))
    assert len(rows_in) >= 60 and {s for *_, s in rows_in} == {split}
    assert not {url for _, _, url, _ in rows_in} & {url for _, _, url, _ in TITLES}
    index = load_catalog(use_cache=False).search_index()
    rows = [(expect, s, [h.id for h in index.search(title, limit=3)]) for title, expect, _, s in rows_in]
    assert _rate(rows, 1) >= floors[0]
    assert _rate(rows, 3) >= floors[1]


def test_blind_readers_cover_the_held_out_titles_and_beat_search_on_them():
    # bench/title_ceiling.py: readers 78% and 81% first, search 62% on the same 129 titles (2026-11-28)
    import subprocess
    import sys

    here = Path(__file__).parent
    readers = yaml.safe_load((here / "title_readers.yaml").read_text(encoding="utf-8"))
    held = [row[0] for split in ("held3", "held7")
            for row in yaml.safe_load((here / f"search_titles_{split}.yaml").read_text(encoding="utf-8"))]
    assert sorted(row[0] for row in readers) == sorted(held)
    ids = {e.id for e in load_catalog()}
    assert all(r[0] in ids and r[1] in ("sure", "guess") for row in readers for r in row[1:])
    bench = here.parent.parent / "bench" / "title_ceiling.py"
    out = subprocess.run([sys.executable, str(bench), "--json"], capture_output=True, text=True, timeout=120)
    figures = yaml.safe_load(out.stdout)
    assert min(figures["reader_a"]["top1"], figures["reader_b"]["top1"]) >= 0.65
    assert figures["search"]["top1"] >= 0.50
