"""Host memory (D28): what each rank of this node can hold in RAM, and whether the OOM killer has been at work.

Every rank of a node shares its RAM, and the limit that bites may be the machine's (MemAvailable) or the memory
cgroup of the container or SLURM job (cgroup v2 memory.max, v1 memory.limit_in_bytes). The kernel counts its
OOM kills: per cgroup in memory.events ("oom_kill N", cgroup v2) and for the whole host in /proc/vmstat
("oom_kill N", Linux 4.13+). A kill inside this job's own cgroup is the finding; kills elsewhere on the host, or a
small share of RAM per rank, are worth a look but prove nothing.
"""
from __future__ import annotations

from typing import Mapping

from gpudoctor.probes import hostinfo
from gpudoctor.probes.base import Result, confirmed, inconclusive, ruled_out

GIB = 1 << 30
# a 7-billion-parameter model loaded in float32 on the CPU is about 28 GB for a moment; a share under this per rank
# is where loading a model on every rank, or a few DataLoader workers each, starts to run the node out
MIN_PER_RANK = 8 * GIB
_NO_LIMIT = 1 << 60  # cgroup v1 writes a near-2^63 number for "no limit"


def probe(options: Mapping) -> Result:
    meminfo = _meminfo(options)
    if not meminfo.get("MemTotal"):
        return inconclusive("no /proc/meminfo (not Linux, or /proc is not readable)", entries=("D28",))
    env = hostinfo.environ(options)
    ranks = _local_ranks(env, options)
    limit, where = _cgroup_limit(options)
    available = meminfo.get("MemAvailable", meminfo.get("MemFree", 0))
    budget = min(available, limit) if limit else available
    per_rank = budget // ranks
    cgroup_kills, host_kills = _cgroup_oom_kills(options), _vmstat(options).get("oom_kill")
    figures = {"mem_total_bytes": meminfo["MemTotal"], "mem_available_bytes": available, "cgroup_limit_bytes": limit,
               "local_ranks": ranks, "per_rank_bytes": per_rank, "cgroup_oom_kills": cgroup_kills,
               "host_oom_kills": host_kills}
    evidence = [f"RAM {_gib(meminfo['MemTotal'])}, {_gib(available)} available"
                + (f"; {where} limits this job to {_gib(limit)}" if limit else "")
                + f"; {_gib(per_rank)} per rank for {ranks} rank{'s' if ranks != 1 else ''} on this node"]
    slurm = [f"{name}={env[name]} MB" for name in ("SLURM_MEM_PER_NODE", "SLURM_MEM_PER_GPU", "SLURM_MEM_PER_CPU")
             if name in env]
    if slurm:
        evidence.append("SLURM asked for " + ", ".join(slurm))
    if meminfo.get("SwapTotal") is not None:
        evidence.append(f"swap {_gib(meminfo['SwapTotal'])}, {_gib(meminfo.get('SwapFree', 0))} free")
    if cgroup_kills:
        return confirmed(f"the OOM killer has killed {cgroup_kills} process(es) inside this job's memory cgroup: host "
                         f"RAM ran out (every rank holds its own copy of what the script loads on the CPU)",
                         evidence, figures, ("D28",))
    if host_kills:
        evidence.append(f"/proc/vmstat: {host_kills} OOM kill(s) on this host since boot (any process; "
                        "`sudo dmesg -T | grep -i 'killed process'` names them)")
    if per_rank < MIN_PER_RANK:
        return inconclusive(f"only {_gib(per_rank)} of RAM per rank for {ranks} ranks: loading a model or a dataset "
                            f"on every rank can run the node out", evidence, figures, ("D28",))
    if host_kills:
        return inconclusive(f"{host_kills} OOM kill(s) on this host since boot; {_gib(per_rank)} per rank now",
                            evidence, figures, ("D28",))
    return ruled_out(f"{_gib(per_rank)} of RAM per rank for {ranks} rank{'s' if ranks != 1 else ''}, no OOM kills "
                     "recorded", evidence, figures, ("D28",))


def _pairs(text: str | None) -> dict[str, int]:
    """'Name: 123 kB' or 'name 123' lines as name -> number (kB in bytes)."""
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.replace(":", " ").split()
        if len(parts) >= 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1]) * (1024 if parts[2:3] == ["kB"] else 1)
    return out


def _meminfo(options: Mapping) -> dict[str, int]:
    return _pairs(hostinfo.read_text(hostinfo.under_root(options, "/proc/meminfo")))


def _vmstat(options: Mapping) -> dict[str, int]:
    return _pairs(hostinfo.read_text(hostinfo.under_root(options, "/proc/vmstat")))


def _cgroup_limit(options: Mapping) -> tuple[int | None, str]:
    """(bytes, which file) of this process's memory cgroup limit; (None, "") when there is none."""
    for path, name in (("/sys/fs/cgroup/memory.max", "the memory cgroup (v2)"),
                       ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "the memory cgroup (v1)")):
        text = hostinfo.read_text(hostinfo.under_root(options, path))
        if text and text.isdigit() and int(text) < _NO_LIMIT:
            return int(text), name
    return None, ""


def _cgroup_oom_kills(options: Mapping) -> int:
    events = _pairs(hostinfo.read_text(hostinfo.under_root(options, "/sys/fs/cgroup/memory.events")))
    return events.get("oom_kill", 0)


def _local_ranks(env: Mapping[str, str], options: Mapping) -> int:
    for name in ("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"):
        value = env.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return max(1, hostinfo.visible_gpu_count(options))


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GIB:.1f} GiB"
