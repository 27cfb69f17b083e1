"""The TUI's diagnosis child: the same answer as in-process, errors that say what happened, nothing left running."""
from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys

import pytest

from gpudoctor.engine.diagnose import diagnose
from gpudoctor.engine.sources import InputError, Source, resolve
from gpudoctor.tui import diagnose_child

from .conftest import EXAMPLE, LOGS

needs_child = pytest.mark.skipif(not diagnose_child.can_use_child(), reason="the child needs POSIX process groups")


def summary(diagnosis):
    return [(f.id, f.tier, round(f.score, 6), [(e.file, e.line, e.signature) for e in f.evidence])
            for f in diagnosis.findings]


@needs_child
@pytest.mark.parametrize("path", [EXAMPLE, LOGS / "D8" / "aux-head-unused-torchrun.log"], ids=["ranks", "D8"])
def test_the_child_answers_as_the_engine_does_in_process(catalog, path):
    sources = resolve([str(path)])
    reports = []
    result, seconds = diagnose_child.diagnose_in_child({"catalog": catalog, "sources": sources},
                                                        cancelled=lambda: False, progress=reports.append)
    assert summary(result) == summary(diagnose(catalog, sources))
    assert result.findings and seconds > 0
    assert reports == sorted(reports)  # bytes read so far, never going back


@needs_child
def test_a_big_log_reports_progress_from_the_child(catalog, tmp_path):
    path = tmp_path / "big.log"
    with open(path, "wb") as fh:  # distinct lines: a scan of repeated blocks proves little
        for i in range(400_000):
            fh.write(f"[rank{i % 8}]: step {i} | loss {1 / (i + 1):.6f} | tokens/s {i * 7 % 99991}\n".encode())
    reports = []
    result, _ = diagnose_child.diagnose_in_child({"catalog": catalog, "sources": resolve([str(path)])},
                                                 cancelled=lambda: False, progress=reports.append)
    assert reports and reports[-1] <= path.stat().st_size
    assert result.inputs[0].bytes == path.stat().st_size


@needs_child
def test_a_file_gone_before_the_scan_comes_back_as_that_input_s_problem(catalog, tmp_path):
    gone = Source(name="rank0.log", path=tmp_path / "rank0.log", size=10)
    result, _ = diagnose_child.diagnose_in_child({"catalog": catalog, "sources": [gone]}, cancelled=lambda: False,
                                                 progress=lambda n: None)
    assert [(i.name, i.problem) for i in result.inputs] == [("rank0.log", "rank0.log: no such file or directory")]


@needs_child
def test_an_input_error_in_the_child_is_raised_in_the_parent(catalog, tmp_path, monkeypatch):
    script = tmp_path / "refuses.py"
    script.write_text("import pickle, struct, sys\nsys.stdin.buffer.read()\n"
                      "body = pickle.dumps(('input-error', 'rank3.log: permission denied'))\n"
                      "sys.stdout.buffer.write(struct.pack('>Q', len(body)) + body)\n")
    monkeypatch.setattr(diagnose_child, "CHILD", [sys.executable, str(script)])
    with pytest.raises(InputError, match="rank3.log: permission denied"):
        diagnose_child.diagnose_in_child({"catalog": catalog, "sources": resolve([str(EXAMPLE)])},
                                         cancelled=lambda: False, progress=lambda n: None)


@needs_child
def test_a_child_that_dies_is_reported_with_its_last_words(catalog, tmp_path, monkeypatch):
    script = tmp_path / "dies.py"
    script.write_text("import sys\nsys.stdin.buffer.read()\nprint('MemoryError: the scan ran out', file=sys.stderr)\n"
                      "sys.exit(3)\n")
    monkeypatch.setattr(diagnose_child, "CHILD", [sys.executable, str(script)])
    with pytest.raises(diagnose_child.ChildFailed, match="exited with code 3 and no result: MemoryError: the scan"):
        diagnose_child.diagnose_in_child({"catalog": catalog, "sources": resolve([str(EXAMPLE)])},
                                         cancelled=lambda: False, progress=lambda n: None)


@needs_child
def test_a_killed_child_is_named_by_its_signal(catalog, tmp_path, monkeypatch):
    script = tmp_path / "killed.py"
    script.write_text("import os, signal, sys\nsys.stdin.buffer.read()\nos.kill(os.getpid(), signal.SIGKILL)\n")
    monkeypatch.setattr(diagnose_child, "CHILD", [sys.executable, str(script)])
    with pytest.raises(diagnose_child.ChildFailed, match="died from SIGKILL"):
        diagnose_child.diagnose_in_child({"catalog": catalog, "sources": resolve([str(EXAMPLE)])},
                                         cancelled=lambda: False, progress=lambda n: None)


@needs_child
def test_an_orphaned_child_stops_at_its_next_progress_report(catalog, tmp_path):
    # the TUI died without cancelling: the child sees another parent and kills its own group
    path = tmp_path / "big.log"
    with open(path, "wb") as fh:
        for i in range(300_000):
            fh.write(f"[rank{i % 4}]: step {i} | loss {1 / (i + 1):.6f}\n".encode())
    job = {"catalog": catalog, "sources": resolve([str(path)]), "parent": os.getppid()}  # not its parent
    proc = subprocess.run(diagnose_child.CHILD, input=pickle.dumps(job), capture_output=True, timeout=120,
                          start_new_session=True)
    assert proc.returncode == -signal.SIGKILL
    assert b"done" not in proc.stdout


def test_without_process_groups_the_diagnosis_runs_here_and_still_cancels(catalog, monkeypatch):
    monkeypatch.setattr(diagnose_child, "can_use_child", lambda: False)
    monkeypatch.setattr(diagnose_child, "CHILD", ["/nonexistent/python"])  # a child would fail to start
    sources = resolve([str(EXAMPLE)])
    result, _ = diagnose_child.diagnose({"catalog": catalog, "sources": sources}, cancelled=lambda: False,
                                        progress=lambda n: None)
    assert summary(result) == summary(diagnose(catalog, sources))
    with pytest.raises(diagnose_child.Cancelled):
        diagnose_child.diagnose({"catalog": catalog, "sources": sources}, cancelled=lambda: True,
                                progress=lambda n: None)
