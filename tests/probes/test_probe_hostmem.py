"""The host-memory probe (D28) on fabricated /proc and cgroup trees, and on this machine."""
from __future__ import annotations

from sysfake import write

from gpudoctor.probes import hostmem, registry, runner
from gpudoctor.probes.base import Status

GIB_KB = 1 << 20  # /proc/meminfo counts in kB


def _root(tmp_path, total_gib=512, available_gib=480, *, limit=None, events=None, vmstat_kills=0, swap_gib=0):
    write(tmp_path / "proc/meminfo", f"MemTotal:       {total_gib * GIB_KB} kB\nMemFree:        {available_gib * GIB_KB} kB\n"
                                     f"MemAvailable:   {available_gib * GIB_KB} kB\nSwapTotal:      {swap_gib * GIB_KB} kB\n"
                                     f"SwapFree:       {swap_gib * GIB_KB} kB\n")
    write(tmp_path / "proc/vmstat", f"nr_free_pages 123\noom_kill {vmstat_kills}\n")
    if limit is not None:
        write(tmp_path / "sys/fs/cgroup/memory.max", f"{limit}\n")
    if events is not None:
        write(tmp_path / "sys/fs/cgroup/memory.events", f"low 0\nhigh 0\nmax 12\noom 3\noom_kill {events}\n")
    return {"sys_root": str(tmp_path), "env": {"LOCAL_WORLD_SIZE": "8"}, "gpu_count": 8}


def test_an_oom_kill_inside_this_jobs_cgroup_confirms_d28(tmp_path):
    result = hostmem.probe(_root(tmp_path, limit=64 << 30, events=2))
    assert result.status is Status.CONFIRMED and result.entries == ("D28",)
    assert "killed 2 process(es) inside this job's memory cgroup" in result.summary
    assert result.figures["cgroup_limit_bytes"] == 64 << 30 and result.figures["per_rank_bytes"] == 8 << 30
    assert "the memory cgroup (v2) limits this job to 64.0 GiB" in result.evidence[0]


def test_a_small_share_per_rank_is_a_warning_not_a_finding(tmp_path):
    result = hostmem.probe(_root(tmp_path, total_gib=64, available_gib=60))
    assert result.status is Status.INCONCLUSIVE and "7.5 GiB of RAM per rank for 8 ranks" in result.summary


def test_kills_elsewhere_on_the_host_are_named_and_plenty_of_ram_rules_out(tmp_path):
    noisy = hostmem.probe(_root(tmp_path, vmstat_kills=3))
    assert noisy.status is Status.INCONCLUSIVE and any("3 OOM kill(s) on this host since boot" in e
                                                      for e in noisy.evidence)
    quiet = hostmem.probe(_root(tmp_path / "b"))
    assert quiet.status is Status.RULED_OUT and "60.0 GiB of RAM per rank for 8 ranks" in quiet.summary
    unlimited = hostmem.probe(_root(tmp_path / "c", limit=9223372036854771712))  # cgroup v1's "no limit"
    assert unlimited.figures["cgroup_limit_bytes"] is None


def test_no_meminfo_is_inconclusive(tmp_path):
    assert hostmem.probe({"sys_root": str(tmp_path)}).status is Status.INCONCLUSIVE


def test_this_machine():
    result = runner.run_probe(registry.get("hostmem"), {})
    assert result.status in (Status.CONFIRMED, Status.RULED_OUT, Status.INCONCLUSIVE), result
    assert result.figures["mem_total_bytes"] > 0
