"""The pure-Python engine's prefilters are sound: whatever they skip holds no match."""
from __future__ import annotations

import io
import random
import re
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudoctor.engine import scan as scan_module
from gpudoctor.engine.anchors import Anchors
from gpudoctor.engine.covers import branches, cheapest, need
from gpudoctor.engine.diagnose import pattern_set
from gpudoctor.engine.engines import available
from gpudoctor.engine.patterns import prefilter_regex
from gpudoctor.engine.scan import Scanner
from gpudoctor.engine.shapes import TABLE, Shapes
from gpudoctor.kb.catalog import load_catalog

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"


@pytest.fixture(scope="module")
def patterns():
    return pattern_set(load_catalog(use_cache=False))


def test_branches_split_only_top_level_alternatives():
    assert branches(r"(?i)a|b(c|d)|[|x]|\||[]|]|e") == ("(?i)", ["a", "b(c|d)", "[|x]", r"\|", "[]|]", "e"])
    assert branches("plain") == ("", ["plain"])
    assert branches("[^]|]x|y") == ("", ["[^]|]x", "y"])
    assert branches("(?:a|b)") == ("", ["(?:a|b)"])
    assert branches(r"(a)x\1|(b)y\2") == ("", [r"(a)x\1|(b)y\2"])  # split, group 2 would not exist


COSTS = {  # several ways of pricing strings: the choice changes, soundness must not
    "flat": lambda s: 1,
    "long is dear": len,
    "short is dear": lambda s: 100 - len(s),
    "hashed": lambda s: zlib.crc32(s.encode()) % 97,
}
EXTRA_LINES = [  # lines the real logs may lack, for the step-line patterns
    "step 100 loss: NaN lr 3e-4", "loss=nan", "NaN in loss at step 7", "non-finite loss detected",
    "Epoch 0: 10%", "epoch 0 step 0 loss 2.3", "step=0", "***** Running training *****",
]


def test_cheapest_strings_occur_in_every_match(patterns):
    text = "\n".join(p.read_text(errors="replace") for p in sorted(LOGS.rglob("*.log"))[:120])
    lines = text.splitlines() + EXTRA_LINES
    checked = 0
    for p in patterns.patterns:
        flags, parts = branches(prefilter_regex(p.regex))
        for part in parts:
            tree = need(flags + part, p.caseless)
            if tree is None:
                continue
            regex = re.compile(flags + part, re.IGNORECASE if p.caseless else 0)
            hits = [line for line in lines if regex.search(line)]
            for name, cost in COSTS.items():
                found = cheapest(tree, cost)
                if found is None:
                    continue
                for line in hits:
                    hay = line.lower() if p.caseless or "i" in flags else line
                    assert any(s in hay for s in found[1]), (p.name, part, name, sorted(found[1]), line[:200])
                    checked += 1
    assert checked > 1000


def test_cheapest_takes_the_rare_word_of_each_alternative():
    tree = need(r"(?i)\bnan\b.{0,40}\bloss\b|\bloss\b.{0,40}\bnan\b|non-finite (?:loss|values)")
    cost = {"loss": 10_000}.get
    assert cheapest(tree, lambda s: cost(s, 1)) == (3, frozenset({"nan", "non-finite "}))
    assert cheapest(tree, lambda s: cost(s, 1), limit=3) is None  # dearer than the limit: re instead


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["abcd", "abcdx", "xabcd", "bcda", "aaaa", "aaab", "zz", "Q0f", "\n"]), max_size=60),
       st.integers(1, 6))
def test_anchors_find_every_occurrence(pieces, budget):
    literals = [b"abcdx", b"xabcd", b"abcdab", b"aaaab", b"aaaa", b"bcdaa", b"cdab"]
    anchors = Anchors(literals)
    text = "".join(pieces).encode()
    for _ in range(3):  # common anchors are given up and the plan changes: still every occurrence
        found = anchors.sweep(text, len(text), budget)
        for lit, offsets in found.items():
            assert offsets == [m.start() for m in re.finditer(b"(?=" + re.escape(lit) + b")", text)
                               if m.start() + len(lit) <= len(text)]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abcdefxyzABCDEFXYZ0123456789 :[]\n", max_size=300), st.data())
def test_shapes_never_rule_out_a_literal_the_block_holds(text, data):
    block = text.encode()
    shapes = Shapes(b"\n".join(set(block.translate(TABLE).split(b"\n"))))
    if not block:
        return
    start = data.draw(st.integers(0, len(block) - 1))
    literal = block[start : start + data.draw(st.integers(1, 12))]
    assert shapes.may_hold(literal)
    assert shapes.may_hold(literal.lower(), folded=True)


def _step_log(seed: int, lines: int, planted: dict[int, str]) -> bytes:
    """Step lines, each with "loss", "step" and often "epoch": the words of D20 and MN5, common here."""
    r = random.Random(seed)
    out = []
    for k in range(lines):
        if k in planted:
            out.append(planted[k])
            continue
        if r.random() < 0.02:
            out.append(f"finance banana {r.randrange(10**6):x} loss-free")  # "nan" inside words: no match
            continue
        out.append(r.choice([
            f"[rank{r.randrange(64)}]:[I1122 11:{r.randrange(60):02d}] step {r.randrange(1, 99999)} loss {r.random():.4f} lr 3e-4",
            f"{{'loss': {r.random() * 4:.4f}, 'grad_norm': {r.random() * 9:.4f}, 'epoch': {r.random() * 3:.2f}}}",
            f"2024-11-02 05:07:23 - INFO - epoch {r.randrange(1, 90)} step {r.randrange(1, 9999)}/9999 loss={r.random():.5f}",
        ]))
    return "\n".join(out).encode()


PLANTED = {
    10: "[rank3]:[I1122] step 500 loss: NaN lr 3e-4",  # caseless, after "loss"
    2000: "NaN detected; the loss will be skipped",  # "nan" before "loss"
    4000: "loss " + "x" * 41 + " nan",  # too far apart: no match
    6000: "nan everywhere but no l-o-s-s",  # "nan" alone: no match
    8000: "Epoch 0: 0%| | 0/100 [00:00<?, ?it/s]",  # MN5's fresh start
}


@pytest.mark.parametrize("chunk", [1 << 16, 300_000, 1 << 20])
def test_python_engine_on_a_step_log_finds_what_each_line_holds(patterns, monkeypatch, chunk):
    """Past the sizes where the big-block paths start, with matches on a line cut by a read (the last one,
    with no newline after it, and others wherever the chunk size puts them)."""
    lines = 12000
    data = _step_log(5, lines, PLANTED) + b"\nloss is nan at the end"
    monkeypatch.setattr(scan_module, "CHUNK", chunk)
    text = data.decode().split("\n")
    wanted = {}  # pattern -> the lines its regex matches, one by one
    for owner, name in (("D20", "rank-nan"), ("MN5", "fresh-start-after-restart")):
        p = next(p for p in patterns.patterns if (p.owner, p.name) == (owner, name))
        wanted[owner] = p.index, [n for n, line in enumerate(text, 1) if patterns.regex(p.index).search(line)]
    assert wanted["D20"][1] == [11, 2001, 12001] and 8001 in wanted["MN5"][1]
    engines = ["python"] + [e for e in available() if e != "python"]
    results = {}
    for engine in engines:
        result = Scanner(patterns, engine=engine).scan(io.BytesIO(data), "steps.log")
        results[engine] = {i: (h.count, [(x.line_no, x.text) for x in h.all()]) for i, h in result.hits.items()
                           if not patterns.patterns[i].single}
        for index, numbers in wanted.values():
            got = result.hits.get(index)
            assert got is not None and got.count == len(numbers), (engine, patterns.patterns[index].name)
            assert [h.line_no for h in got.all()] == numbers, (engine, patterns.patterns[index].name)
    for engine in engines[1:]:
        assert results[engine] == results["python"], engine


def test_a_context_pattern_anchored_at_the_body_is_found_behind_a_prefix(patterns):
    """D23's `^[Rank N]` context pattern on a line that opens with a c10d prefix: the scan verifies it on
    the line's body, so the Python engine's first line for it must be that line (it used to skip it)."""
    p = next(p for p in patterns.patterns if (p.owner, p.name) == ("D23", "multi-rank"))
    assert p.single and p.index in patterns.anchored
    data = (b"2024-05-07 15:51:09,140 - root - INFO - Starting training step on epoch 3\n"
            b"no rank here: rank 3 of 4\n"
            b"[E ProcessGroupNCCL.cpp:457] [Rank 3] Watchdog caught collective operation timeout\n")
    for engine in available():
        hits = Scanner(patterns, engine=engine).scan(io.BytesIO(data), "rank.log").hits
        assert p.index in hits and [h.line_no for h in hits[p.index].all()] == [3], engine


PIECES = [" loss ", " NaN ", "nan", " nan ", "Loss:", " step 0 ", "step=12", "epoch 0:", " Epoch 3", "[rank3]:",
          "[Rank 1] ", "rank", " NCCL WARN ", " NCCL INFO ", "Traceback (most recent call last):", "RuntimeError: ",
          "0xAbC9", "Error", "Connection reset by peer", "CUDA out of memory", " non-finite loss",
          "Watchdog caught collective operation timeout", " ", ": ", "=", "42", "\t", "x" * 45]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(PIECES), max_size=8).map("".join), min_size=1, max_size=80),
       st.sampled_from([(0, 2), (0, 256), (1 << 40, 2)]))
def test_python_engine_matches_a_compiled_one_on_made_up_lines(patterns, lines, thresholds):
    """Lines made of the words the patterns look for, with every path of the Python engine forced
    (line shapes or not, literals common from their second line or not)."""
    from gpudoctor.engine import engine_python

    reference = "re2" if "re2" in available() else available()[0]
    assert reference != "python", "no compiled engine installed: nothing to compare with"
    data = ("\n".join(lines) * 3).encode()  # each line thrice: common literals, repeated shapes
    saved = engine_python.SHAPES_FROM, engine_python.COMMON_LITERAL
    engine_python.SHAPES_FROM, engine_python.COMMON_LITERAL = thresholds
    try:
        found = {}
        for engine in ("python", reference):
            hits = Scanner(patterns, engine=engine).scan(io.BytesIO(data), "made-up.log").hits
            found[engine] = {i: (h.count, [(x.line_no, x.text) for x in h.all()]) for i, h in hits.items()
                             if reference == "re2" or not patterns.patterns[i].single}
    finally:
        engine_python.SHAPES_FROM, engine_python.COMMON_LITERAL = saved
    assert found["python"] == found[reference]


@pytest.mark.parametrize("lines", [
    ["", "", "", "Watchdog caught collective operation timeout", "Watchdog caught collective operation timeout",
     "Watchdog caught collective operation timeout" * 2],  # the second occurrence ends the line
    ["", "Watchdog caught collective operation timeout", " "],  # a blank line of spaces after it
])
def test_a_match_running_on_into_blank_lines_stays_on_its_own_line(patterns, lines):
    """MN3's `...timeout:?\\s*$` over a whole block runs on through the newlines and spaces after it to where `$`
    holds; the Python engine (where a literal is common) and re2 attributed such a match to the blank line it ended
    on, and lost the line (found by the made-up-lines comparison above)."""
    from gpudoctor.engine import engine_python

    p = next(p for p in patterns.patterns if (p.owner, p.name) == ("MN3", "watchdog-timeout"))
    data = ("\n".join(lines) * 3).encode()
    want = [n for n, line in enumerate(data.decode().split("\n"), 1) if line.endswith("timeout")]
    saved = engine_python.SHAPES_FROM, engine_python.COMMON_LITERAL
    engine_python.SHAPES_FROM, engine_python.COMMON_LITERAL = 0, 2  # the common-literal path, block regex
    try:
        for engine in available():
            hits = Scanner(patterns, engine=engine).scan(io.BytesIO(data), "blank.log").hits
            assert [h.line_no for h in hits[p.index].all()] == want, engine
    finally:
        engine_python.SHAPES_FROM, engine_python.COMMON_LITERAL = saved
