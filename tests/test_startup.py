"""Start-up guards: a diagnose of a small log loads only what it needs and parses almost no regex on a warm run."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data" / "logs"
# Each of these cost `diagnose` milliseconds at start-up and none is needed for a small log.
NEVER = ["dataclasses", "inspect", "yaml", "rich", "textual", "torch", "hyperscan", "re2", "importlib.metadata",
         "multiprocessing", "concurrent.futures", "shutil", "pickle", "gpudoctor.kb.loader", "gpudoctor.kb.mdblocks",
         "gpudoctor.engine.parallel", "gpudoctor.engine.flight", "gpudoctor.engine.fixes", "gpudoctor.engine.lint"]
# only the possible tier (no signature matched) needs the search index, and rapidfuzz, which imports typing
MATCH_ONLY = ["typing", "rapidfuzz", "gpudoctor.kb.search"]
# regexes that argparse, gettext, locale, pickle, textwrap (the report) and the catalogue's id parser compile
# on every run: 14 today; before the regex cache and the lazy patterns a warm run parsed about 130
WARM_PARSES_MAX = 16


def _run(log: Path, stdin: bool = False) -> dict:
    source = "'-'" if stdin else repr(str(log))
    code = (
        "import io, json, sys\n"
        "import re._compiler as rc\n"
        "from gpudoctor.main import main\n"
        "parse = rc.compile\n"
        "count = [0]\n"
        "def counting(*a, **k):\n"
        "    count[0] += 1\n"
        "    return parse(*a, **k)\n"
        "rc.compile = counting\n"
        f"rc_ = main(['diagnose', '--no-color', {source}], stdout=io.StringIO(), stderr=io.StringIO())\n"
        "print(json.dumps({'rc': rc_, 'parses': count[0], 'modules': sorted(sys.modules)}))\n"
    )
    feed = log.read_text() if stdin else None
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, input=feed)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def one_kb_log(tmp_path) -> Path:
    path = tmp_path / "one-kb.log"
    lines = [f"[rank0]:[I1122 20:34:{i:02d}.984769 10245 train.py:391] step {i} loss 0.8664 lr 4.22e-04"
             for i in range(9)]
    lines.append("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
                 "address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_small_log_with_a_match_loads_only_what_it_needs(one_kb_log):
    _run(one_kb_log)  # the first run fills the caches (catalogue, regex programs)
    warm = _run(one_kb_log)
    assert warm["rc"] == 0  # D4 matched
    loaded = set(warm["modules"])
    assert not loaded & set(NEVER + MATCH_ONLY), sorted(loaded & set(NEVER + MATCH_ONLY))
    assert warm["parses"] <= WARM_PARSES_MAX, warm["parses"]


def test_a_traceback_without_a_match_loads_no_dataclasses_either():
    log = DATA / "D8" / "layerdrop-debug-info" / "rank1.log"  # a traceback, 1 KB, only possible causes
    _run(log)
    warm = _run(log)
    assert warm["rc"] == 1
    loaded = set(warm["modules"])
    assert "gpudoctor.engine.tracebacks" in loaded and "gpudoctor.kb.search" in loaded
    assert not loaded & set(NEVER), sorted(loaded & set(NEVER))
    assert warm["parses"] <= WARM_PARSES_MAX + 6, warm["parses"]  # rapidfuzz and the search compile a few


def test_a_pasted_line_on_stdin_loads_neither_the_worker_pool_nor_multiprocessing(tmp_path):
    """A pipe is scanned by this process whatever its size: the pool's module and multiprocessing (5 ms) stay out."""
    log = tmp_path / "pasted.log"
    log.write_text("RuntimeError: Default process group has not been initialized, please make sure to call "
                   "init_process_group.\n")
    _run(log, stdin=True)
    warm = _run(log, stdin=True)
    assert warm["rc"] in (0, 1)
    loaded = set(warm["modules"])
    assert not loaded & set(NEVER), sorted(loaded & set(NEVER))


def test_the_catalogue_cache_leaves_the_parsed_markdown_to_its_own_file(monkeypatch):
    from gpudoctor.kb import catalog as catalog_module
    from gpudoctor.kb import mdblocks

    first = catalog_module.load_catalog()  # builds and writes the caches (the test's own cache folder)
    entry = first.get("D8")
    expected = first.blocks(entry)
    stored_fp, stored = catalog_module._read_cache(catalog_module._cache_path())
    assert stored.rendered == {} and stored.index is None  # diagnose unpickles neither
    later = catalog_module.load_catalog()
    assert later.rendered == {}

    def no_parsing(text):
        raise AssertionError("parsed again instead of read from rendered.pickle")

    monkeypatch.setattr(mdblocks, "parse_blocks", no_parsing)
    assert later.blocks(entry) == expected
