"""Runbooks of the user's own.

QA25b B5: a runbook regex that backtracks (`(a|a)*b`, `(.*a){25}!`, `a*a*a*a*b`) made diagnose hang on a short
line, past Ctrl-C. A runbook's signatures are matched by RE2, in linear time, on every engine; a construct RE2
lacks (a lookaround, a backreference) is refused with its file and field.
QA25b B7, B9: a runbook saved as .yml is read like .yaml (it was skipped in silence, and validate passed the
folder), and validate names a `probes:` id no probe has (show and diagnose would tell users to run it)."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from gpudoctor.kb import linear

needs_re2 = pytest.mark.skipif(not linear.available(), reason="google-re2 is not installed here")

RUNBOOK = """id: U9
title: Custom storage quota exceeded during checkpoint save
section: user
summary: The job writes checkpoints to a quota-limited volume and the save fails.
symptoms:
  - save fails with quota exceeded
cause: The volume quota is too small.
fix:
  - text: Raise the quota or prune old checkpoints.
fix_summary: Raise the quota.
log_visibility: shows
signatures:
  - id: quota
    {kind}: '{regex}'
    weight: 0.9
probes: [{probe}]
"""
CLI = [sys.executable, "-m", "gpudoctor"]


def _kb(tmp_path, regex: str, *, kind: str = "regex", probe: str = "hostmem", name: str = "U9-quota.yaml"):
    folder = tmp_path / "kb"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(RUNBOOK.replace("{regex}", regex).replace("{kind}", kind).replace("{probe}", probe))
    return folder


@needs_re2
@pytest.mark.parametrize("regex, stalls, hits", [
    ("ZZQUOTA (a|a)*b", "ZZQUOTA " + "a" * 40 + "!", "ZZQUOTA aaab"),
    ("ZZQUOTA (.*a){25}!b", "ZZQUOTA " + "a" * 60, "ZZQUOTA " + "a" * 25 + "!b"),
    ("ZZQUOTA a*a*a*a*a*a*a*a*b", "ZZQUOTA " + "a" * 400 + "!", "ZZQUOTA aab"),
])
@pytest.mark.parametrize("engine", ["python", "auto"])
def test_a_backtracking_runbook_regex_ends_quickly_and_still_matches(tmp_path, regex, stalls, hits, engine):
    kb = _kb(tmp_path, regex)
    assert subprocess.run(CLI + ["validate", "--kb", str(kb)], capture_output=True, timeout=60).returncode == 0
    log = tmp_path / "job.log"
    log.write_text(stalls + "\n")
    start = time.monotonic()
    done = subprocess.run(CLI + ["diagnose", "--kb", str(kb), "--engine", engine, str(log), "--json"],
                          capture_output=True, text=True, timeout=60)
    assert time.monotonic() - start < 20 and done.returncode == 1
    log.write_text(stalls + "\n" + hits + "\n")
    done = subprocess.run(CLI + ["diagnose", "--kb", str(kb), "--engine", engine, str(log), "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and '"id": "U9"' in done.stdout


@needs_re2
def test_a_runbook_regex_re2_cannot_match_is_named_with_its_file_and_field(tmp_path):
    kb = _kb(tmp_path, "(?<=ZZ)QUOTA exceeded")
    done = subprocess.run(CLI + ["validate", "--kb", str(kb)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "U9-quota.yaml" in said and "signatures[0].regex" in said and "RE2 cannot match this" in said
    assert "re2.cc" not in said  # RE2's own log line stays off the terminal


def test_a_yml_runbook_is_read_and_an_unknown_probe_is_named(tmp_path):
    kb = _kb(tmp_path, "ZZQUOTA exceeded", kind="literal", name="U9-quota.yml")
    log = tmp_path / "job.log"
    log.write_text("ZZQUOTA exceeded\n")
    done = subprocess.run(CLI + ["diagnose", "--kb", str(kb), str(log), "--json"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and '"id": "U9"' in done.stdout
    assert subprocess.run(CLI + ["validate", str(kb)], capture_output=True, timeout=60).returncode == 0
    _kb(tmp_path, "ZZQUOTA exceeded", kind="literal", probe="nosuchprobe", name="U9-quota.yml")
    done = subprocess.run(CLI + ["validate", str(kb)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "U9-quota.yml: probes[0]: unknown probe 'nosuchprobe'" in done.stdout
