"""Search ranks the right entry first for the phrasings users type, typos included."""
from pathlib import Path

import pytest
import yaml

from gpudoctor.kb.catalog import load_catalog

CASES = yaml.safe_load((Path(__file__).parent / "search_cases.yaml").read_text())


@pytest.fixture(scope="module")
def index():
    return load_catalog(use_cache=False).search_index()


def test_there_are_enough_cases():
    assert len(CASES) >= 31  # the six and at least 25 more


@pytest.mark.parametrize("query, expected", CASES, ids=[c[0][:40] for c in CASES])
def test_query_ranks_expected_entry_first(index, query, expected):
    hits = index.search(query, limit=3)
    assert hits, f"no result for {query!r}"
    assert hits[0].id == expected, f"{query!r}: got {[(h.id, h.score) for h in hits]}"


@pytest.mark.parametrize("query", ["banana smoothie recipe", "the weather today", "   ", "!!!"])
def test_unrelated_queries_find_nothing(cli, query):
    result = cli("search", query)
    assert result.code in (1, 2)
    assert "D" not in result.out.split("\n")[0][:3]


def test_scores_are_ordered_and_bounded(index):
    hits = index.search("nccl hangs at init", limit=10)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert all(0 <= s <= 1 for s in scores)
