"""QA25b B7, B9: a runbook saved as .yml is read like .yaml (it was skipped in silence, and validate passed the
folder), and validate names a `probes:` id no probe has (show and diagnose would tell users to run it)."""
from __future__ import annotations

import subprocess
import sys

RUNBOOK = """id: U7
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
    literal: 'ZZQUOTA exceeded'
    weight: 0.9
probes: [{probe}]
"""
CLI = [sys.executable, "-m", "gpudoctor"]


def test_a_yml_runbook_is_read_and_an_unknown_probe_is_named(tmp_path):
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "U7-quota.yml").write_text(RUNBOOK.replace("{probe}", "hostmem"))
    log = tmp_path / "job.log"
    log.write_text("ZZQUOTA exceeded\n")
    done = subprocess.run(CLI + ["diagnose", "--kb", str(kb), str(log), "--json"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and '"id": "U7"' in done.stdout
    assert subprocess.run(CLI + ["validate", str(kb)], capture_output=True, timeout=60).returncode == 0
    (kb / "U7-quota.yml").write_text(RUNBOOK.replace("{probe}", "nosuchprobe"))
    done = subprocess.run(CLI + ["validate", str(kb)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "U7-quota.yml: probes[0]: unknown probe 'nosuchprobe'" in done.stdout
