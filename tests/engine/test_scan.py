"""The streaming scanner: any bytes, exact line numbers, constant memory, both engines agree."""
from __future__ import annotations

import gzip
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpudoctor.engine.scan as scan_mod
from gpudoctor.engine.diagnose import diagnose, pattern_set
from gpudoctor.engine.engines import available
from gpudoctor.engine.scan import Scanner
from gpudoctor.engine.sources import resolve
from gpudoctor.kb.catalog import load_catalog

WATCHDOG = ("[rank3]:[E1122 01:58:03.026000 8038 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=57, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, "
            "Timeout(ms)=1800000) ran for 1800093 milliseconds before timing out.")
PORT = ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")
NOISE = "node-1:123:456 [0] NCCL INFO Channel 00/32 :    0   1   2   3"


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(use_cache=False)


@pytest.fixture(scope="module")
def patterns(catalog):
    return pattern_set(catalog)


ENGINES = available()


def scan_bytes(patterns, data: bytes, engine: str | None = None):
    scanner = Scanner(patterns, engine=engine)
    assert engine is None or scanner.engine == engine  # a named engine must really be the one that ran
    return scanner.scan(io.BytesIO(data), "<test>")


def hits_of(result) -> dict:
    return {i: (h.count, [x.line_no for x in h.all()]) for i, h in result.hits.items()}


def run(catalog, tmp_path, data: bytes, name: str = "x.log", engine: str | None = None):
    path = tmp_path / name
    path.write_bytes(data)
    return diagnose(catalog, resolve([str(path)]), engine=engine)


def test_at_least_two_engines_are_installed_so_that_their_agreement_is_tested():
    import platform

    # the default install brings hyperscan and re2 wherever both have wheels; python is always there
    assert len(ENGINES) >= 2, ENGINES
    if platform.system() == "Linux" and platform.machine() in ("x86_64", "aarch64"):
        assert ENGINES == ["hyperscan", "re2", "python"]


def test_line_numbers_point_at_the_matched_lines(patterns):
    lines = [NOISE] * 10 + [PORT] + [NOISE] * 5 + [WATCHDOG] + [NOISE]
    result = scan_bytes(patterns, ("\n".join(lines) + "\n").encode())
    assert result.lines == len(lines)
    numbers = {h.line_no for hits in result.hits.values() for h in hits.all()}
    assert {11, 17} <= numbers
    for hits in result.hits.values():
        for h in hits.all():
            assert h.text == lines[h.line_no - 1]


@pytest.mark.parametrize("chunk", [7, 64, 4096])
def test_chunk_boundaries_do_not_move_or_lose_lines(patterns, monkeypatch, chunk):
    lines = [NOISE] * 50 + [PORT] + [NOISE] * 50 + [WATCHDOG]
    data = ("\r\n".join(lines) + "\r\n").encode()
    monkeypatch.setattr(scan_mod, "CHUNK", chunk)
    result = scan_bytes(patterns, data)
    assert result.lines == len(lines)
    found = sorted({h.line_no for hits in result.hits.values() for h in hits.all()})
    assert 51 in found and 102 in found
    assert all(not h.text.endswith("\r") for hits in result.hits.values() for h in hits.all())


def test_huge_single_line_is_scanned_in_bounded_pieces(patterns, monkeypatch):
    monkeypatch.setattr(scan_mod, "CHUNK", 1 << 16)
    monkeypatch.setattr(scan_mod, "MAX_LINE", 1 << 17)
    big = b"x" * (1 << 20) + b" " + PORT.encode() + b" " + b"y" * (1 << 19)
    result = scan_bytes(patterns, big + b"\n" + WATCHDOG.encode() + b"\n")
    assert result.lines == 2
    assert result.cut_lines == 1
    found = {h.line_no for hits in result.hits.values() for h in hits.all()}
    assert found == {1, 2}
    assert all(len(h.text) <= scan_mod.MAX_TEXT for hits in result.hits.values() for h in hits.all())


def test_ansi_colour_inside_an_error_does_not_hide_it(catalog, tmp_path):
    coloured = b"\x1b[31mRuntimeError\x1b[0m: Expected to have \x1b[1mfinished reduction\x1b[0m in the prior iteration\n"
    result = run(catalog, tmp_path, coloured)
    assert result.findings[0].id == "D8"


def test_empty_and_missing_final_newline(patterns):
    assert scan_bytes(patterns, b"").lines == 0
    assert scan_bytes(patterns, b"one line, no newline").lines == 1
    assert scan_bytes(patterns, b"a\nb").lines == 2
    assert scan_bytes(patterns, b"a\nb\n").lines == 2


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=3000))
def test_arbitrary_bytes_never_raise_and_lines_exist(patterns, data):
    for engine in ENGINES:
        result = scan_bytes(patterns, data, engine)
        assert result.lines == (data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1))
        for hits in result.hits.values():
            for h in hits.all():
                assert 1 <= h.line_no <= result.lines


LINE = st.sampled_from([NOISE, PORT, WATCHDOG, "", "step 10 loss 0.5", "\x00\xff junk", "RuntimeError: boom",
                        "Expected to have finished reduction in the prior iteration"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(LINE, max_size=40))
def test_every_engine_gives_the_same_hits(patterns, lines):
    data = "\n".join(lines).encode("utf-8", "surrogateescape")
    results = {engine: hits_of(scan_bytes(patterns, data, engine)) for engine in ENGINES}
    assert len(results) >= 2
    first = results[ENGINES[0]]
    assert all(r == first for r in results.values()), results


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=st.integers(0, 200), after=st.integers(0, 200), seed=st.integers(0, 3))
def test_unrelated_noise_does_not_change_the_top_finding(catalog, tmp_path, before, after, seed):
    noise = [NOISE, "epoch 3 step 120 loss 1.234", "INFO:root:saving metrics", "Downloading shards: 100%"]
    core = [PORT] if seed % 2 else ["[rank1]: RuntimeError: Expected to have finished reduction in the prior iteration"]
    lines = [noise[(i + seed) % 4] for i in range(before)] + core + [noise[i % 4] for i in range(after)]
    result = run(catalog, tmp_path, ("\n".join(lines) + "\n").encode())
    assert result.findings[0].id == ("D4" if seed % 2 else "D8")
    ev = result.findings[0].evidence[0]
    assert ev.line == before + 1


def test_gzip_input_gives_the_same_findings(catalog, tmp_path):
    data = ("\n".join([NOISE] * 100 + [PORT]) + "\n").encode()
    plain = run(catalog, tmp_path, data, "a.log")
    (tmp_path / "b.log.gz").write_bytes(gzip.compress(data))
    packed = diagnose(catalog, resolve([str(tmp_path / "b.log.gz")]))
    assert [f.id for f in plain.findings] == [f.id for f in packed.findings] == ["D4"]
    assert plain.findings[0].evidence[0].line == packed.findings[0].evidence[0].line == 101


def test_shipped_signatures_compile_exactly_under_every_compiled_engine(catalog, monkeypatch):
    from gpudoctor.engine import engine_hyperscan, engine_re2
    from gpudoctor.engine.patterns import PatternSet

    monkeypatch.setenv("GPUDOCTOR_NO_CACHE", "1")  # compile now rather than load a cached database
    fresh = PatternSet.from_entries(catalog)
    if "hyperscan" in ENGINES:
        assert engine_hyperscan.HyperscanMatcher.build(fresh) is not None
        # exact matching keeps context patterns to one match per block; a prefiltered one is slower
        assert [fresh.patterns[i].name for i in engine_hyperscan.prefiltered(fresh)] == []
    if "re2" in ENGINES:
        matcher = engine_re2.Re2Matcher.build(fresh)
        assert matcher is not None and matcher.rest is None  # RE2 reads every shipped pattern itself


def test_structural_literals_are_what_each_regex_requires():
    from gpudoctor.engine.patterns import STRUCTURAL
    from gpudoctor.kb.literals import required_literals

    for name, (regex, literals) in STRUCTURAL.items():
        # declared by hand so that start-up need not parse the regexes; they must agree
        assert required_literals(regex) == frozenset(literals), name


def test_parallel_split_scan_equals_the_sequential_scan(catalog, patterns, tmp_path, monkeypatch):
    import gpudoctor.engine.parallel as par

    monkeypatch.setattr(par, "SPLIT_FROM_BYTES", 1 << 12)
    monkeypatch.setattr(par, "PARALLEL_FROM_BYTES", 1 << 12)
    monkeypatch.setattr(par, "workers", lambda: 3)
    lines = []
    for i in range(3000):
        lines.append(NOISE if i % 97 else PORT)
        if i in (5, 1500, 2999):
            lines.append(WATCHDOG)
    data = ("\n".join(lines) + "\n").encode()
    path = tmp_path / "big.log"
    path.write_bytes(data)
    sources = resolve([str(path)])
    scanner = Scanner(patterns)
    (split,) = par.scan_parallel(scanner, sources)
    whole = scanner.scan(open(path, "rb"), str(path))
    assert split.lines == whole.lines == len(lines)
    assert split.tail == whole.tail
    # context patterns report one line per block, and splitting makes more blocks: compare the rest exactly
    exact = [i for i in whole.hits if not patterns.patterns[i].single]
    assert set(split.hits) == set(whole.hits)
    assert {i: (split.hits[i].count, [x.line_no for x in split.hits[i].all()]) for i in exact} == {
        i: (whole.hits[i].count, [x.line_no for x in whole.hits[i].all()]) for i in exact
    }


def test_engines_agree_when_a_literal_is_on_every_line(patterns):
    # past COMMON_LITERAL occurrences the Python engine hands the rest of the block to re
    lines = [f"[rank0] epoch 3 step {i} loss 0.{i % 97:02d}" for i in range(3000)]
    lines[1700] = "E1122 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 0"
    lines[2500] = "[rank0] epoch 0 step 0 loss 0.9"
    data = ("\n".join(lines) + "\n").encode()
    results = {engine: scan_bytes(patterns, data, engine) for engine in ENGINES}
    assert len(results) >= 2
    first = hits_of(results[ENGINES[0]])
    assert all(hits_of(r) == first for r in results.values())
    assert all(any(h.line_no == 2501 for hits in r.hits.values() for h in hits.all()) for r in results.values())


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("pad", [3000, 6000, 200_000])
def test_evidence_on_a_huge_line_is_centred_on_the_error(patterns, engine, pad):
    line = b"x" * pad + b" " + PORT.encode() + b" " + b"y" * pad
    result = scan_bytes(patterns, line + b"\n", engine)
    texts = {h.text for hits in result.hits.values() for h in hits.all()}
    assert texts, "the error on the huge line was not found"
    for text in texts:
        assert len(text) <= scan_mod.MAX_TEXT
        assert PORT in text and text.startswith("…") and text.endswith("…")
        left = text.index(PORT)
        right = len(text) - left - len(PORT)
        assert abs(left - right) < 2 * len(PORT)  # the error sits in the middle of what is kept


def test_binary_and_huge_line_input_is_flagged_in_every_format(cli_proc, tmp_path):
    import json

    path = tmp_path / "odd.log"
    path.write_bytes(b"\x00\x01binary\x00\n" + b"z" * (3 << 20) + b"\n" + PORT.encode() + b"\n")
    text = cli_proc("diagnose", str(path), env={"NO_COLOR": "1"})
    md = cli_proc("diagnose", str(path), "--format", "markdown")
    js = json.loads(cli_proc("diagnose", str(path), "--json").out)
    for out in (text.out, md.out, "\n".join(js["notes"])):
        assert "binary data" in out and "lines of 512 KiB or more" in out
    assert js["inputs"][0]["binary"] is True and js["inputs"][0]["huge_lines"] is True


def test_a_rare_word_the_pattern_needs_stands_in_for_a_literal_on_every_line(patterns):
    # "loss" on every line: the Python engine looks for "nan" instead, and must find what the others find
    lines = [f"[rank0] step {i} loss 0.{i % 89:02d} lr 3e-4" for i in range(4000)]
    lines[3100] = "[rank0] step 3100 loss nan lr 3e-4"
    data = ("\n".join(lines) + "\n").encode()
    results = {engine: scan_bytes(patterns, data, engine) for engine in ENGINES}
    first = hits_of(results[ENGINES[0]])
    assert all(hits_of(r) == first for r in results.values())
    nan = [i for i, p in enumerate(patterns.patterns) if p.name == "rank-nan"]
    assert nan and all(3101 in first[i][1] for i in nan)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(0, 300), max_size=400), cut=st.tuples(st.integers(0, 50), st.integers(0, 50)),
       as_bytes=st.booleans())
def test_counting_newlines_by_memchr_agrees_with_bytes_count(monkeypatch, lengths, cut, as_bytes):
    # small thresholds, so that short inputs take every branch: plain count, short lines, pieces, a ragged end
    monkeypatch.setattr(scan_mod, "_MEMCHR_FROM", 64)
    monkeypatch.setattr(scan_mod, "_MEMCHR_PIECE", 1000)
    data = b"".join(b"x" * n + b"\n" for n in lengths) + b"tail"
    data = data if as_bytes else bytearray(data)
    start, end = cut[0], max(cut[0], len(data) - cut[1])
    assert scan_mod.count_newlines(data, start, end) == data.count(b"\n", start, end)


@pytest.mark.parametrize("line", [10, 104, 4000])
def test_counting_newlines_at_real_sizes(line):
    block = bytearray((b"y" * (line - 1) + b"\n") * ((3 << 20) // line) + b"z" * 500)  # three pieces and more
    for start, end in ((0, len(block)), (7, len(block) - 300), (1 << 20, (2 << 20) + 5)):
        assert scan_mod.count_newlines(block, start, end) == block.count(b"\n", start, end)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_scanner_reads_its_next_source_as_a_fresh_one_would(patterns, engine):
    # a scanner keeps its buffer for the next source: what the last source left past the new one's end never counts
    noisy = ("\n".join([WATCHDOG, PORT] * 3000) + "\n").encode()
    for second in (b"", b"ok\n", (NOISE + "\n").encode() * 50 + b"last words", b"x" * 5000 + b"\n" + PORT.encode()):
        reused = Scanner(patterns, engine=engine)
        reused.scan(io.BytesIO(noisy), "first", None, len(noisy))
        again = reused.scan(io.BytesIO(second), "second", None, len(second))
        fresh = Scanner(patterns, engine=engine).scan(io.BytesIO(second), "second", None, len(second))
        assert (again.lines, again.bytes, again.tail, again.windows) == (fresh.lines, fresh.bytes, fresh.tail,
                                                                          fresh.windows)
        assert hits_of(again) == hits_of(fresh)
        assert all(h.text == g.text for i in fresh.hits for h, g in zip(fresh.hits[i].all(), again.hits[i].all()))


@pytest.mark.parametrize("chunk", [64, 1 << 16])
def test_each_ranks_last_line_is_kept_near_the_end(patterns, monkeypatch, chunk):
    # one merged log: rank 1 stops printing early, the others go on; its last line is still known
    monkeypatch.setattr(scan_mod, "CHUNK", chunk)
    lines = ["[rank0] step 1", "[rank1] step 1", "[rank1] epoch 0 done", NOISE, "[rank0] step 2",
             "[rank0]: RuntimeError: boom", "[1,2]<stderr>:hello", "plain line"]
    result = scan_bytes(patterns, ("\n".join(lines) + "\n").encode())
    seen = {text: no for no, text in result.rank_tail.values()}
    assert seen == {"[rank1] epoch 0 done": 3, "[rank0]: RuntimeError: boom": 6, "[1,2]<stderr>:hello": 7}


def test_a_rank_whose_only_line_opens_the_log_is_kept_and_a_named_rank_file_skips_the_search(patterns):
    data = b"[rank3] loaded 12 shards\n[rank0] step 1\n[rank0] step 2\n"
    result = scan_bytes(patterns, data)
    assert {text: no for no, text in result.rank_tail.values()} == {"[rank3] loaded 12 shards": 1, "[rank0] step 2": 3}
    # a per-rank file among several, its rank in its name: engine/ranks.py reads its own last line instead
    skipped = Scanner(patterns).scan(io.BytesIO(data), "rank3.log", None, len(data), rank_tail=False)
    assert skipped.rank_tail == {} and skipped.tail == result.tail


def test_a_ranks_last_line_is_found_behind_a_collectors_column_and_under_torchrun_tee(patterns):
    ts = "2024-05-01T12:34:56.123456789Z "
    lines = [ts + "[rank0] step 1", ts + "[rank1] epoch 0 done", ts + "[rank0] step 2"]
    result = scan_bytes(patterns, ("\n".join(lines) + "\n").encode())
    assert {text: no for no, text in result.rank_tail.values()} == {"[rank1] epoch 0 done": 2, "[rank0] step 2": 3}
    tee = ["[default0]:[rank0] step 1", "[default1]:[rank1] epoch 0 done", "[default0]:loss 2.3", "[default0]:step 2"]
    result = scan_bytes(patterns, ("\n".join(tee) + "\n").encode())
    assert {text: no for no, text in result.rank_tail.values()} == {"[default1]:[rank1] epoch 0 done": 2,
                                                                     "[default0]:step 2": 4}


def test_terminal_evidence_from_a_huge_line_shows_the_words_that_matched(cli, tmp_path):
    path = tmp_path / "oneline.log"
    path.write_text("x" * (3 << 20) + " RuntimeError: Address already in use " + "y" * (3 << 20), encoding="utf-8")
    res = cli("diagnose", "--no-color", str(path))
    shown = " ".join(line.strip() for line in res.out.splitlines()[2:4])
    assert res.code == 0 and "Address already in use" in shown, res.out[:600]
    assert all(len(line) <= 80 for line in res.out.splitlines())


class _Trickle(io.RawIOBase):
    """A pipe that hands over a few bytes per read, as a slow writer's does."""

    def __init__(self, data: bytes, step: int) -> None:
        self._data, self._at, self._step = data, 0, step

    def readable(self) -> bool:
        return True

    def readinto(self, view) -> int:
        n = min(len(view), self._step, len(self._data) - self._at)
        view[:n] = self._data[self._at : self._at + n]
        self._at += n
        return n


@pytest.mark.parametrize("size", [scan_mod.SNIFF - 100, scan_mod.SNIFF + 5000, 3 * scan_mod.SNIFF])
def test_a_stream_of_unknown_size_is_read_whole_through_short_reads(patterns, size):
    line = b"[rank3]: RuntimeError: Address already in use\n"
    filler = b"".join(b"step %07d loss 0.25\n" % i for i in range(size // 22 + 1))[:size]
    data = filler[: filler.rfind(b"\n") + 1] + line
    result = Scanner(patterns).scan(_Trickle(data, 777), "<pipe>")
    assert result.bytes == len(data) and result.lines == data.count(b"\n")
    assert any(h.all()[-1].line_no == result.lines for h in result.hits.values())
