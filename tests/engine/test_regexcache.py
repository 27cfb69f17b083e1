"""engine.regexcache and engine.lazyregex: cached and lazy patterns are the very patterns re.compile makes."""
from __future__ import annotations

import pickle
import re

import pytest

from gpudoctor.engine import regexcache
from gpudoctor.engine.lazyregex import LazyRegex


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A regexcache as a new process sees it, with its table file under tmp_path."""
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(regexcache, "_table", None)
    monkeypatch.setattr(regexcache, "_file", None)
    monkeypatch.setattr(regexcache, "_added", 0)
    monkeypatch.setattr(regexcache, "_generation", 0)
    monkeypatch.setattr(regexcache, "_used", set())

    def restart():
        regexcache._table, regexcache._file, regexcache._added = None, None, 0
        regexcache._generation, regexcache._used = 0, set()

    return restart


def _all_patterns() -> list[tuple[object, int]]:
    from gpudoctor.engine.diagnose import pattern_set
    from gpudoctor.engine.patterns import prefilter_regex
    from gpudoctor.kb.catalog import load_catalog

    out = []
    for p in pattern_set(load_catalog()).patterns:
        flags = re.IGNORECASE if p.caseless else 0
        out.append((p.regex, flags))
        out.append((prefilter_regex(p.regex).encode("utf-8"), flags | re.MULTILINE))
    out += [(r"(?P<a>x)(y)?(?P<b>z)", re.ASCII), (rb"\d+", 0), (r"^a$", re.M | re.S | re.X)]
    return out


def test_cached_programs_equal_re_compile_in_a_later_process(fresh):
    patterns = _all_patterns()
    first = [regexcache.compile(p, f) for p, f in patterns]
    regexcache._save()
    assert regexcache._file is not None and regexcache._file.exists()
    fresh()  # a new run: every program now comes from the table
    later = [regexcache.compile(p, f) for p, f in patterns]
    assert len(regexcache._table) >= len(set(patterns)) - 1
    for (p, f), a, b in zip(patterns, first, later):
        expected = re.compile(p, f)
        # Pattern equality compares the pattern, the flags and the whole compiled program
        assert a == expected and b == expected, p
        assert (b.groups, b.groupindex, b.flags) == (expected.groups, expected.groupindex, expected.flags)


def test_a_damaged_table_or_program_falls_back_to_parsing(fresh):
    regexcache.compile(r"ab+c", 0)
    regexcache._save()
    path = regexcache._file
    fresh()
    regexcache._load()
    regexcache._table[(r"ab+c", 0)] = (1, (32, [999, 1, 2], 0, {}, (None,)))  # not a program _sre accepts
    assert regexcache.compile(r"ab+c", 0) == re.compile(r"ab+c")
    path.write_bytes(b"\x00garbage")
    fresh()
    assert regexcache.compile(r"ab+c", 0).search("xabbbc").group() == "abbbc"


def test_a_full_table_starts_again(fresh, monkeypatch):
    monkeypatch.setattr(regexcache, "MAX_ENTRIES", 3)
    for n in range(5):
        regexcache.compile(f"x{{{n + 1}}}", 0)
    assert len(regexcache._table) <= 3 and ("x{5}", 0) in regexcache._table


def test_bad_patterns_raise_re_error_and_no_cache_writes_nothing(fresh, monkeypatch, tmp_path):
    with pytest.raises(re.error):
        regexcache.compile(r"(unbalanced", 0)
    monkeypatch.setenv("GPUDOCTOR_NO_CACHE", "1")
    fresh()
    regexcache.compile(r"q+", 0)
    regexcache._save()
    assert not list(tmp_path.glob("regex*"))


def test_patterns_no_run_uses_are_dropped_after_some_saves(fresh, monkeypatch):
    monkeypatch.setattr(regexcache, "KEEP_SAVES", 3)
    regexcache.compile(r"old+", 0)  # a signature an upgrade removed
    regexcache.compile(r"kept+", 0)
    regexcache._save()
    for n in range(5):  # five later runs, each compiling `kept+` and one new pattern, and saving
        fresh()
        assert regexcache.compile(r"kept+", 0).fullmatch("keptt")
        regexcache.compile(f"new{n}", 0)
        regexcache._save()
        fresh()
        table = regexcache._load()
        assert (r"kept+", 0) in table
        assert ((r"old+", 0) in table) == (n < 2), n  # unused for three saves: gone
    assert regexcache._generation == 6 and table[("new4", 0)][0] == 6 and table[("new2", 0)][0] == 4
    assert ("new1", 0) not in table and ("new0", 0) not in table


def test_lazy_regex_stands_in_for_a_compiled_pattern():
    lazy = LazyRegex(r"(?P<word>[a-z]+)-(\d+)", re.IGNORECASE)
    real = re.compile(lazy.pattern, lazy.flags)
    text = "x AB-12 cd-3 ef"
    assert lazy.search(text).group("word") == real.search(text).group("word")
    assert lazy.match(text, 2).span() == real.match(text, 2).span()
    assert lazy.fullmatch("ab-1") and not lazy.fullmatch("ab-1 ")
    assert lazy.findall(text) == real.findall(text)
    assert [m.span() for m in lazy.finditer(text)] == [m.span() for m in real.finditer(text)]
    assert lazy.sub("_", text) == real.sub("_", text) and lazy.subn("_", text) == real.subn("_", text)
    assert lazy.split(text) == real.split(text)
    assert (lazy.groups, dict(lazy.groupindex)) == (2, {"word": 1})
    assert lazy.search(text, 4, 7) is None and lazy.search(text, 2, 7).group() == "AB-12"
    # a match names the compiled pattern: compare sources, never `m.re is LAZY`
    assert lazy.search(text).re.pattern == lazy.pattern
    joined = LazyRegex(lazy.pattern + "|" + LazyRegex(r"zz").pattern)
    assert joined.search("zz").group() == "zz"
    clone = pickle.loads(pickle.dumps(lazy))
    assert clone == lazy and hash(clone) == hash(lazy) and clone.search(text).group() == "AB-12"


def test_cut_traceback_frames_keep_the_python_source_line():
    # the frame test that once broke when possible.py's regexes became lazy (`m.re is _PY_FRAME`)
    from gpudoctor.engine.failure_lines import frames_query

    lines = ['  File "/work/train.py", line 12, in compute_loss', "    loss = criterion(out, target)"]
    assert frames_query(lines) == "compute_loss loss = criterion(out, target)"
