"""The desync toolkit probe: a real gloo pair with mismatched collectives under TORCH_DISTRIBUTED_DEBUG=DETAIL."""
from __future__ import annotations

from gpudoctor.probes import desync, registry, runner
from gpudoctor.probes.base import Status


def test_mismatches_are_named_and_a_skipped_collective_times_out_promptly():
    result = runner.run_probe(registry.get("desync"), {})
    assert result.status is Status.RULED_OUT, result
    scenarios = result.figures["scenarios"]
    assert scenarios["shapes"]["ok"] and scenarios["ops"]["ok"] and scenarios["skipped"]["ok"]
    assert scenarios["skipped"]["seconds"] < desync.TIMEOUT_S + desync.SLACK_S
    assert any(desync.MISMATCH_TEXT in line for line in result.evidence)
    # without DETAIL the same mismatch gives no report; the probe shows that for contrast
    assert not scenarios["shapes-without-detail"]["ok"]
    # QA25b B6: it shows the tooling works here; it rules out nothing about the user's own job
    assert result.entries == ()


def test_judging_a_silent_hang():
    ok, line = desync.judge({"name": "shapes", "rank0": None, "died_from": None, "seconds": 16.0}, 1.0)
    assert not ok and "silent hang" in line
    ok, line = desync.judge({"name": "skipped", "rank0": None, "died_from": "SIGABRT", "seconds": 1.2}, 1.0)
    assert ok  # NCCL's watchdog tearing the rank down at the timeout is the prompt failure D19 wants
