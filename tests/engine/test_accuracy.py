"""The evaluation set: real logs with provenance, enough per entry, and accuracy that does not regress."""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from gpudoctor.kb.catalog import load_catalog

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "data" / "logs"
# the development set: manifest.yaml and the later batches beside it (manifest-n1.yaml, ...)
MANIFEST = [case for f in sorted(LOGS.glob("manifest*.yaml")) for case in yaml.safe_load(f.read_text()) or []]


def test_manifest_paths_exist_and_every_log_is_listed():
    listed = {(LOGS / case["path"]).resolve() for case in MANIFEST}
    assert all(p.exists() for p in listed)
    for path in LOGS.rglob("*"):
        if path.is_file() and not (path.name.startswith("manifest") and path.suffix == ".yaml"):
            real = path.resolve()  # listed itself, or inside a listed per-rank folder
            assert real in listed or not listed.isdisjoint(real.parents), path
    assert all(case.get("source") for case in MANIFEST)


@pytest.mark.parametrize("base", [LOGS, ROOT / "tests" / "data" / "sealed"], ids=["dev", "sealed"])
def test_no_log_is_listed_twice(base):
    # a row per log: a second listing counted one log twice (two sealed logs were, from 2026-11-27 to 11-28); only the
    # manifests' paths are read here, never a sealed log
    paths = Counter(case["path"] for f in sorted(base.glob("manifest*.yaml")) for case in yaml.safe_load(f.read_text()) or [])
    assert sum(n - 1 for n in paths.values()) == 0, f"{sum(n > 1 for n in paths.values())} paths listed twice"


# Entries whose catalogue text says they show in a log before the development set held three logs of them go here
# until it does (D12-D14 and D26 waited here until the collections of 2026-11-27 brought them to 4-7 logs each).
AWAITING_LOGS: set[str] = set()


def test_every_log_visible_entry_has_three_logs_and_there_are_ten_negatives():
    catalog = load_catalog(use_cache=False)
    counts = Counter(case["expect"] for case in MANIFEST)
    for entry in catalog:
        if entry.log_visibility == "shows" and entry.id not in AWAITING_LOGS:
            assert counts[entry.id] >= 3, entry.id
    assert counts[None] >= 10


def _bench():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import accuracy
    finally:
        sys.path.pop(0)
    return accuracy


@pytest.fixture(scope="module")
def dev_figures():
    return _bench().evaluate()


def test_accuracy_meets_its_floor(dev_figures):
    # measured on this branch's development set (bench/accuracy.py -v prints the misses): top-1 95%, top-3 96%,
    # negatives without a confident match 100%, the possible tier alone (signatures off) 77% top-3, keyword
    # baseline 65% top-1; on the larger development set being collected (141 positives, 40 negatives) with the
    # emitter signatures: top-1 84%, top-3 88%, negatives 100%, possible alone 75%, baseline 64%.
    # After the issue-8 accuracy pass (three local-rank D3 logs relabelled null): top-1 77%, top-3 87%, negatives
    # 99%, possible tier 50% (18/36) on positives where nothing matched, possible alone 77%, baseline 61%.
    # 2026-11-26, after signatures from the emitters for every entry (five branches): top-1 89%, top-3 91%,
    # negatives 100%, possible alone 76%, baseline 60%.
    # 2026-11-27, with the 30 logs collected that day (manifest-n1..n3.yaml; 200 positives, 89 negatives): top-1 87%,
    # top-3 91%, negatives 98%, possible alone 77%, baseline 60%.
    # Later that day, the possible tier also searches the last failure lines together: possible alone top-1 65% -> 70%
    # (10 logs gained, none lost), top-3 77% -> 76% (one log). With 34 more logs (manifest-n4..n6.yaml; 220 positives,
    # 103 negatives) and four emitter sweeps (NCCL source, accelerate/transformers, Horovod and torch elastic, old
    # torch releases): top-1 86%, top-3 90%, negatives 98%, possible alone 70% / 77%, baseline 61%; with 7 more
    # (manifest-n7.yaml; 224 / 106): top-1 86%, top-3 90%, negatives 97%.
    # Floors sit well under both; the sealed set's floor is the integrator's.
    result = dev_figures
    assert result["top1"] >= 0.70
    assert result["top3"] >= 0.80
    assert result["negatives_clean"] >= 0.90
    assert result["possible_alone_top3"] >= 0.65
    assert result["possible_alone_top1"] >= 0.55
    # a rate over the positives no signature matched: each log a new signature matches leaves that set, and those
    # that leave are mostly ones the possible tier already ranked (2026-11-26, five signature branches: 15/33 ->
    # 4/19, no log lost), so this floor only guards against a collapse; possible_alone_top3 above (measured 76%)
    # guards the tier itself
    assert result["possible_top3"] >= 0.10
    # the engine must stay well above keyword search over its own catalogue. The baseline is gpudoctor's own search,
    # so it rises when search does: in session 15 (2026-11-28) search learned the emitters' message templates and to
    # skip torch's stock CUDA advice, the baseline went 62.9% -> 65.6% on dev and the margin 10.4 -> 7.8 points; the
    # floor moved from +10 to +5 points with it
    assert result["top1"] >= result["baseline_top1"] + 0.05


def test_sealed_set_meets_its_floor():
    """The sealed set (threads and repositories no signature was written from) holds its measured level.

    Measured once after the issue-8 work (bench/accuracy.py): 47 positives, 33 negatives; top-1 57%, top-3 81%,
    negatives without a confident match 94%, the possible tier 65% (11/17) where nothing matched, keyword
    baseline 70% / 81%. With collector e's logs (manifest-e.yaml): 51 positives, 38 negatives; top-1 57%, top-3 82%,
    negatives 92%. With collector f's logs (manifest-f.yaml): 56 positives, 42 negatives; top-1 61%, top-3 84%,
    negatives 93%. 2026-11-26, after emitter signatures for every entry (dev top-1 81% -> 89%): top-1 64%, top-3 86%,
    negatives 90% (one more false alarm), the report's first-named entry 80% against the keyword baseline's 73%.
    2026-11-27, with the 28 logs collected that day (manifest-g..j.yaml; 73 positives, 53 negatives): top-1 63%,
    top-3 85%, negatives 91%, first named 80%, baseline 75% / 84%; the earlier 98 logs unchanged by that day's
    work (log forms: collectors' columns, rich and IPython tracebacks, CRLF). Later that day, with 16 more logs
    (manifest-k, -l; 85 positives, 57 negatives): top-1 60%, top-3 84%, negatives 91%, first named 79%, baseline
    75% / 82%; the earlier 126 logs exactly as before (63% / 85% / 91%) after four emitter sweeps that added about
    eighty signatures. The floors sit well under that; a
    change that raises the development figures and lowers these is a regression."""
    bench = _bench()
    figures = bench.evaluate_cases(bench.load_cases(bench.SEALED, "manifest*.yaml"))
    assert figures["positives"] >= 40 and figures["negatives"] >= 25
    assert figures["top1"] >= 0.45
    assert figures["top3"] >= 0.70
    assert figures["negatives_clean"] >= 0.85


def test_bench_reads_every_sealed_manifest_and_tolerates_none(tmp_path):
    """Every manifest*.yaml under a folder counts; a missing folder is an empty set, not an error."""
    bench = _bench()
    assert bench.load_cases(tmp_path / "absent", "manifest*.yaml") == []
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.log").write_text("RuntimeError: CUDA error: invalid device ordinal\n")
    (tmp_path / "manifest.yaml").write_text("- path: a/x.log\n  expect: D3\n  framework: deepspeed\n")
    (tmp_path / "manifest-b.yaml").write_text("- path: a/x.log\n  expect: null\n")
    cases = bench.load_cases(tmp_path, "manifest*.yaml")
    assert [c["framework"] for c in cases] == ["pytorch", "deepspeed"]  # sorted by file; pytorch inferred
    figures = bench.evaluate_cases(cases)
    assert figures["positives"] == 1 and figures["negatives"] == 1
    assert set(figures["by_framework"]) == {"pytorch", "deepspeed"}


def test_bench_hides_sealed_rows_unless_asked(tmp_path, monkeypatch, capsys):
    bench = _bench()
    sealed = tmp_path / "sealed"
    (sealed / "D4").mkdir(parents=True)
    (sealed / "D4" / "p.log").write_text(
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use\n")
    (sealed / "D4" / "miss.log").write_text("nothing to see\n")
    (sealed / "manifest.yaml").write_text("- path: D4/p.log\n  expect: D4\n- path: D4/miss.log\n  expect: D4\n")
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "n.log").write_text("all good\n")
    (dev / "manifest.yaml").write_text("- path: n.log\n  expect: null\n")
    monkeypatch.setattr(bench, "SEALED", sealed)
    monkeypatch.setattr(bench, "DEV", dev)
    bench.main(["-v"])
    out = capsys.readouterr().out
    assert "sealed" in out and "miss.log" not in out and "50.0%" in out  # aggregate only
    bench.main(["--show-sealed"])
    assert "miss.log" in capsys.readouterr().out
    bench.main(["--json"])
    doc = json.loads(capsys.readouterr().out)
    assert "rows" in doc["dev"] and "rows" not in doc["sealed"] and doc["sealed"]["top1"] == 0.5


def test_batches_are_rows_of_their_set_with_counts(tmp_path, monkeypatch, capsys):
    """--batches slices the rows already diagnosed (no second diagnosis) and prints one row per batch; the JSON
    carries the counts behind each rate."""
    bench = _bench()
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "a.log").write_text("torch.distributed.DistNetworkError: The server socket has failed to listen on any "
                               "local network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, "
                               "message: address already in use\n")
    (dev / "b.log").write_text("all good\n")
    (dev / "manifest.yaml").write_text("- path: a.log\n  expect: D4\n")
    (dev / "manifest-z9.yaml").write_text("- path: b.log\n  expect: D4\n")
    monkeypatch.setattr(bench, "DEV", dev)
    monkeypatch.setattr(bench, "BATCHES", {"dev-new": (dev, "manifest-z[0-9].yaml")})
    calls = []
    real = bench.evaluate_cases
    monkeypatch.setattr(bench, "evaluate_cases", lambda cases, *a, **k: calls.append(len(cases)) or real(cases, *a, **k))
    bench.main(["--dev-only", "--batches"])
    out = capsys.readouterr().out
    assert calls == [2]  # the whole development set, once
    row = next(line for line in out.splitlines() if line.startswith("dev-new"))
    assert row.split()[1:3] == ["1/0", "0.0%"]
    bench.main(["--dev-only", "--batches", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["dev"]["hits"]["top1"] == 1 and doc["dev-new"]["hits"]["top1"] == 0 and doc["dev-new"]["positives"] == 1


def test_keyword_baseline_searches_the_last_five_error_looking_lines(tmp_path):
    bench = _bench()
    log = tmp_path / "job.log"
    lines = ["step 1 loss 2.0", "RuntimeError: first", "info line", "WARNING: second", "ERROR third", "x failed fourth",
             "Traceback (most recent call last):", "ValueError: sixth", "step 2 loss 1.0", "ValueError: sixth"]
    log.write_text("\n".join(lines) + "\n")
    query = bench.baseline_query(log).splitlines()
    assert query == ["WARNING: second", "ERROR third", "x failed fourth", "Traceback (most recent call last):",
                     "ValueError: sixth"]


def test_every_manifest_names_a_known_framework():
    """The per-framework table groups by this label: a new spelling ("accelerate") would open a row of its own."""
    bench = _bench()
    for case in bench.load_cases(bench.DEV, "manifest*.yaml"):
        assert case["framework"] in bench.FRAMEWORKS, (case["path"], case["framework"])
    unknown = sum(case["framework"] not in bench.FRAMEWORKS for case in bench.load_cases(bench.SEALED, "manifest*.yaml"))
    assert unknown == 0, f"{unknown} sealed case(s) name an unknown framework"  # a count: the sealed set is not read


def test_wilson_interval_matches_the_textbook_values():
    accuracy = _bench()
    low, high = accuracy.wilson(50, 100)
    assert abs(low - 0.4038) < 1e-3 and abs(high - 0.5962) < 1e-3  # Wilson (1927), p = 0.5, n = 100
    low, high = accuracy.wilson(0, 10)
    assert low == 0.0 and abs(high - 0.2775) < 1e-3
    assert accuracy.wilson(3, 0) is None


def test_before_relabel_restores_the_label_a_relabel_names_as_was(tmp_path):
    bench = _bench()
    for name in ("a.log", "b.log"):
        (tmp_path / name).write_text("RuntimeError: Default process group has not been initialized\n")
    (tmp_path / "manifest.yaml").write_text(
        "- path: a.log\n  expect: D1\n  was: null\n  relabelled: 'labelling rule'\n"
        "- path: b.log\n  expect: null\n  was: D1\n  relabelled: 'the thread found a library bug'\n")
    assert [c["expect"] for c in bench.load_cases(tmp_path, "manifest*.yaml")] == ["D1", None]
    assert [c["expect"] for c in bench.load_cases(tmp_path, "manifest*.yaml", before_relabel=True)] == [None, "D1"]


def test_before_relabel_counts_a_relabelled_case_as_the_negative_it_was(tmp_path):
    bench = _bench()
    (tmp_path / "x.log").write_text("include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device\n")
    (tmp_path / "manifest.yaml").write_text("- path: x.log\n  expect: D24\n  relabelled: 'was a negative until D24'\n")
    assert [c["expect"] for c in bench.load_cases(tmp_path, "manifest*.yaml")] == ["D24"]
    old = bench.load_cases(tmp_path, "manifest*.yaml", before_relabel=True)
    assert [c["expect"] for c in old] == [None]
    figures = bench.evaluate_cases(old)
    assert figures["negatives"] == 1 and figures["negatives_clean"] == 0.0  # D24 now matches what was a negative


def test_blind_labels_name_dev_logs_and_the_label_ceiling_bench_runs():
    """tests/data/blind_labels.yaml: 120 public development logs a reader labelled from the log and the catalogue
    alone (session 14: reader 87.5% top-1 and sure of 51% of the positives, all of those right; gpudoctor 68.8%
    confident, 85.0% first named, and a match on 95% of the logs the reader was sure of and right about)."""
    catalog_ids = {e.id for e in load_catalog(use_cache=False)}
    rows = yaml.safe_load((ROOT / "tests" / "data" / "blind_labels.yaml").read_text())
    dev_paths = {case["path"] for case in MANIFEST}
    assert len(rows) >= 100 and all(r["path"] in dev_paths for r in rows)
    assert all(r["confidence"] in ("sure", "guess") for r in rows)
    assert all(label is None or label in catalog_ids for r in rows for label in [r["label"], *r["alternatives"]])
    sys.path.insert(0, str(ROOT / "bench"))
    import label_ceiling

    f = label_ceiling.figures(label_ceiling.load("dev"))
    assert f["logs"] == len(rows) and f["positives"] >= 60
    # where a reader was sure of the cause from the log alone, gpudoctor names it with confidence
    assert f["tool_top1_where_reader_sure_and_right"] >= 0.8
    assert f["tool_first_named"] >= 0.7
    # the sealed sample, labelled by other readers (session 14: reader 90.0% top-1; gpudoctor 65.0% confident,
    # 87.5% first named, a match on 83% of the logs the reader was sure of and right about): aggregates only
    sealed = label_ceiling.figures(label_ceiling.load("sealed"))
    assert sealed["positives"] >= 60 and sealed["negatives"] >= 30
    assert sealed["tool_first_named"] >= 0.7
    assert sealed["tool_top1_where_reader_sure_and_right"] >= 0.65


def test_outcomes_sort_each_positive_into_one_kind():
    bench = _bench()
    rows = [{"expect": "D1", "matches": ["D1"], "possible": []}, {"expect": "D1", "matches": ["D4"], "possible": ["D1"]},
            {"expect": "D1", "matches": [], "possible": ["D1", "D4"]}, {"expect": "D1", "matches": [], "possible": ["D4"]},
            {"expect": "D1", "matches": [], "possible": []}]
    assert [bench.outcome(r) for r in rows] == list(bench.OUTCOMES)


def test_a_second_log_of_one_thread_is_left_out_and_counted(tmp_path):
    """One log per thread: two logs from one issue (its description and a comment) would count the same incident
    twice; the one in the manifest read first stays."""
    bench = _bench()
    for name in ("a.log", "b.log", "c.log"):
        (tmp_path / name).write_text("RuntimeError: Default process group has not been initialized\n")
    (tmp_path / "manifest-a.yaml").write_text(
        "- path: a.log\n  expect: D1\n  source: 'public: https://github.com/o/r/issues/7 (o/r #7, the description)'\n"
        "- path: c.log\n  expect: D1\n  source: 'public: https://github.com/o/r/issues/70'\n")
    (tmp_path / "manifest-b.yaml").write_text(
        "- path: b.log\n  expect: null\n  source: 'public: https://github.com/O/r/issues/7#issuecomment-1 (a comment)'\n")
    cases = bench.load_cases(tmp_path, "manifest*.yaml")
    assert [c["path"] for c in cases] == ["a.log", "c.log"] and cases.repeats == 1
