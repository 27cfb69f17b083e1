"""Speed floors for `gpudoctor lint` (bench/lint_speed.py has the full targets; these sit well under them)."""
from __future__ import annotations

import importlib.util
import py_compile
import time
from pathlib import Path

from besttime import best_of
from gpudoctor.engine.lint import lint_paths

BENCH = Path(__file__).resolve().parents[3] / "bench" / "lint_speed.py"


def _make_script():
    spec = importlib.util.spec_from_file_location("lint_speed", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_script


def _best(fn, repeat=3):
    """Best of `repeat` wall times (tests/besttime.py): a `gpudoctor lint` starts from a fresh process."""
    return best_of(fn, repeat)


def test_5000_line_script_within_10x_of_py_compile(tmp_path):
    path = tmp_path / "big.py"
    path.write_text(_make_script()(5000))
    result = lint_paths([str(path)], jobs=1)
    assert result.files == 1 and not result.errors and result.findings  # really analysed
    compile_s = _best(lambda: py_compile.compile(str(path), cfile=str(tmp_path / "big.pyc"), doraise=True))
    lint_s = _best(lambda: lint_paths([str(path)], jobs=1))
    assert lint_s <= 10 * compile_s, (lint_s, compile_s)  # measured about 2.5x


def test_tree_in_parallel(tmp_path):
    make = _make_script()
    for i in range(200):
        (tmp_path / f"train_{i:03d}.py").write_text(make(250))
    t0 = time.perf_counter()
    result = lint_paths([str(tmp_path)], jobs=2)
    elapsed = time.perf_counter() - t0
    assert result.files == 200 and not result.errors
    assert elapsed <= 30, elapsed  # about 1.3 CPU-s per 100 such files; 500 files take 3-4 s per core
