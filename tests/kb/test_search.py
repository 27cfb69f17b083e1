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


def test_spellings_of_one_identifier_meet():
    from gpudoctor.kb.search import tokenize

    assert tokenize("allreduce hangs")[0] in tokenize("all_reduce hangs")
    assert tokenize("allreduce")[0] in tokenize("all-reduce")
    # stems meet whatever the suffix: save, saves, saved, saving
    assert len({tokenize(w)[0] for w in ("save", "saves", "saved", "saving")}) == 1
    # a script's name is the user's choice: its pieces are not words about the failure
    assert "train" not in tokenize("python dist_train.py") and "dist" not in tokenize("python dist_train.py")
    # a library file's name says what ran, spelled together: data_parallel.py reads as DataParallel
    assert tokenize("DataParallel")[0] in tokenize("torch/nn/parallel/data_parallel.py")
    # the pieces of a number are no words
    assert tokenize("loss 0.25") == ["loss", "0.25"]


def test_a_compound_counts_once(index):
    # "multi-gpu" is one idea: the compound and its parts must not add up to outweigh the failure word
    hits = index.search("multi-gpu training is stuck", limit=3)
    assert hits and hits[0].id != "D5", [(h.id, h.score) for h in hits]


def test_one_shared_word_gets_no_line_bonus(index):
    # a single word that sits in an entry's title is no more evidence than the word's own score
    assert all(h.score < 0.15 for h in index.search("zebra crossing", limit=5))


def test_log_lines_are_searched_without_the_line_bonus(index):
    with_lines = {h.id: h.score for h in index.search("training hangs after one rank crashes", limit=3)}
    without = {h.id: h.score for h in index.search("training hangs after one rank crashes", limit=3, lines=False)}
    assert next(iter(with_lines)) == "D20" and next(iter(without)) == "D20"
    assert with_lines != without


def test_every_synonym_target_is_stable():
    from gpudoctor.kb.search import _SYNONYMS, tokenize

    # a canonical word must come out of the tokenizer as itself, or "minute" and "minutes" would part ways
    assert [v for v in set(_SYNONYMS.values()) if "-" not in v and tokenize(v) != [v]] == []


@pytest.mark.parametrize("forms", [("save", "saves", "saved", "saving"), ("use", "uses", "used", "using"),
                                   ("stop", "stops", "stopped", "stopping"), ("hang", "hangs", "hung", "hanging"),
                                   ("freeze", "freezes", "freezing", "stuck"), ("kill", "killed", "crash")])
def test_inflections_meet(forms):
    from gpudoctor.kb.search import tokenize

    assert len({tuple(tokenize(f)) for f in forms}) == 1, [tokenize(f) for f in forms]


# queries in Chinese, Japanese and Korean, as users post them on their own forums (written here, not from the
# entries' text): the words the tokenizer cannot read on its own must still reach the entry they describe
CJK = [
    ("单机多卡 所有进程都在第一张卡上 显存不足", "D3"),
    ("多机训练 保存的检查点 找不到", "MN7"),
    ("docker 共享内存 不足 NCCL 报错", "D24"),
    ("端口被占用 torchrun", "D4"),
    ("断点续训 从第0步开始", "MN5"),
    ("NCCL 超时 30分钟", "MN3"),
    ("dockerの共有メモリが足りない", "D24"),
    ("멀티노드 체크포인트 로드 실패", "MN7"),
]


@pytest.mark.parametrize("query, expected", CJK, ids=[c[0] for c in CJK])
def test_cjk_words_reach_their_entries(index, query, expected):
    hits = index.search(query, limit=3)
    assert hits, f"no result for {query!r}"
    assert hits[0].id == expected, f"{query!r}: got {[(h.id, h.score) for h in hits]}"


def test_without_the_cjk_words_those_queries_are_blind(index):
    """The control: with the CJK words stripped, the first two queries above find nothing, so the test above is
    measuring the word map, not the Latin fragments around it."""
    import re

    for query, _ in CJK[:2] + CJK[-1:]:
        assert not index.search(re.sub(r"[^\x00-\x7f]", " ", query), limit=3)


def test_every_cjk_word_becomes_words_the_catalogue_has(index):
    """A mapping to words no entry uses would read the query and still find nothing."""
    from gpudoctor.kb.cjk_words import _WORDS
    from gpudoctor.kb.search import tokenize

    for phrase, english in _WORDS.items():
        assert any(t in index.df for t in tokenize(english)), (phrase, english)


def test_a_message_known_only_from_a_signatures_source_earns_the_phrase_bonus(index):
    from gpudoctor.kb.search import _template_phrases

    catalog = load_catalog(use_cache=False)
    d12 = catalog.get("D12")
    message = "could not find the transformer layer class to wrap in the model"
    # D12 lists no error string: the message is known from the emitter's template behind its signature
    assert not any(message in s.lower() for s in d12.error_strings)
    assert message in _template_phrases(d12)
    query = "accelerate加速，微调bce模型报错：Could not find the transformer layer class to wrap in the model."
    assert index.search(query, limit=1)[0].id == "D12"
    # a corroborating signature's template (context, needs) is no phrase: it names no entry on its own
    assert not any("file \"" in p for e in catalog for p in _template_phrases(e))


def test_torchs_stock_cuda_advice_is_not_searched(index):
    from gpudoctor.kb.boilerplate import without_stock_advice

    advice = ("CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
              "might be incorrect. For debugging consider passing CUDA_LAUNCH_BLOCKING=1. Compile with "
              "`TORCH_USE_CUDA_DSA` to enable device-side assertions.")
    assert without_stock_advice(advice).split() == []
    error = "RuntimeError: CUDA error: invalid device ordinal"
    assert index.search(f"{error} {advice}", limit=3) == index.search(error, limit=3)
    assert without_stock_advice("no advice here") == "no advice here"
