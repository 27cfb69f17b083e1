"""The runner: a child in its own session, a group kill at the timeout, crashes as Errored, nothing left behind."""
from __future__ import annotations

import json
import os
import socket
import time

import psutil
import pytest

from gpudoctor.probes import registry, runner
from gpudoctor.probes.base import Probe, Result, Status


def fixture_probe(name: str, timeout_s: float = 20.0, needs=()) -> Probe:
    return Probe(name, name, f"probe_fixtures:{name}", timeout_s=timeout_s, needs=needs)


def gone(pid: int) -> bool:
    """No such process, or only a zombie waiting for init: nothing runs, nothing holds a port."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def group_members(pgid: int) -> list[int]:
    alive = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return alive


def test_a_result_comes_back_through_stdout_noise(fixture_env):
    result = runner.run_probe(fixture_probe("ok"), {}, env=fixture_env)
    assert result.status is Status.RULED_OUT, result
    assert result.figures == {"answer": 42} and result.entries == ("D4",)
    assert result.probe == "ok" and result.duration_s > 0


def test_a_hanging_probe_is_killed_at_its_timeout_with_everything_it_started(fixture_env, tmp_path):
    record = tmp_path / "pids.json"
    start = time.monotonic()
    result = runner.run_probe(fixture_probe("hang", timeout_s=2), {"record": str(record)}, env=fixture_env)
    elapsed = time.monotonic() - start
    assert result.status is Status.ERRORED
    assert "timed out after 2 s" in result.summary
    # the timeout plus the SIGTERM grace (the probe ignores SIGTERM), never much more
    assert elapsed < 2 + runner.GRACE_S + 3
    pids = json.loads(record.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not (gone(pids["child"]) and gone(pids["grandchild"])):
        time.sleep(0.05)
    assert gone(pids["child"]), "the probe process outlived its timeout"
    assert gone(pids["grandchild"]), "a process the probe started was left behind"
    assert group_members(pids["child"]) == []
    with socket.socket() as sock:  # the port the grandchild held is free again
        sock.bind(("127.0.0.1", pids["port"]))


@pytest.mark.parametrize("name, expected", [
    ("abort", "died from SIGABRT"),
    ("boom", "ValueError: this probe is broken"),
    ("not_a_result", "not a Result"),
    ("exit_quietly", "exited with code 3"),
])
def test_a_crash_becomes_errored(fixture_env, name, expected):
    result = runner.run_probe(fixture_probe(name), {}, env=fixture_env)
    assert result.status is Status.ERRORED
    assert expected in result.summary


def test_one_crash_never_stops_the_others(fixture_env, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", fixture_env["PYTHONPATH"])
    probes = [fixture_probe("abort"), fixture_probe("ok"), fixture_probe("boom"), fixture_probe("ok")]
    seen = []
    results = runner.run_probes(probes, {}, parallel=2, on_done=seen.append)
    assert [r.status for r in results] == [Status.ERRORED, Status.RULED_OUT, Status.ERRORED, Status.RULED_OUT]
    assert len(seen) == 4


def test_unmet_needs_skip_without_starting_a_child(monkeypatch):
    monkeypatch.setattr(runner.hostinfo, "torch_installed", lambda: False)
    result = runner.run_probe(fixture_probe("hang", needs=("torch",)), {})
    assert result.status is Status.SKIPPED and result.summary == "torch is not installed in this environment"
    result = runner.run_probe(fixture_probe("hang", needs=("peer",)), {})
    assert result.status is Status.SKIPPED and "--peer" in result.summary
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi to find, whatever this machine has
    no_driver = {"sys_root": "/nonexistent"}
    result = runner.run_probe(fixture_probe("hang", needs=("cuda",)), no_driver)
    assert result.status is Status.SKIPPED and "NVIDIA driver" in result.summary


def test_results_round_trip_through_json():
    result = Result(Status.CONFIRMED, "s", ("e",), {"x": [1, 2]}, ("MN2",), "nic", 1.5)
    assert Result.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_registry_maps_probes_to_entries():
    from gpudoctor.kb.catalog import load_catalog

    catalog = load_catalog()
    assert [p.id for p in registry.probes_for(catalog, "d04")] == ["port"]
    assert {p.id for p in registry.probes_for(catalog, "MN2")} == {"nic", "collectives"}
    assert set(registry.entries_for(catalog, "desync")) >= {"D9", "D19", "D21", "D22"}
    assert all(p.target.startswith("gpudoctor.probes.") for p in registry.PROBES)
    with pytest.raises(ValueError):
        Probe("x", "x", "m:f", needs=("wings",))
