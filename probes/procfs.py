"""What Linux's /proc says of another process: its command line, environment and parent, or nothing when it is gone
or another user's. The probes that look at the machine's processes (port holders, a job's ranks) read it here."""
from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")


def command(pid: int, proc: Path = PROC) -> list[str]:
    """Its argv; [] when it cannot be read."""
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def environ(pid: int, proc: Path = PROC) -> dict[str, str] | None:
    """Its environment as it was started; None when it cannot be read (gone, or another user's)."""
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def parent(pid: int, proc: Path = PROC) -> int | None:
    try:
        stat = (proc / str(pid) / "stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])  # after the name, which may hold spaces and parentheses
    except (OSError, ValueError, IndexError):
        return None


def ancestors(pid: int, proc: Path = PROC, limit: int = 64) -> set[int]:
    """pid and the processes above it, up to (not including) init."""
    chain: set[int] = set()
    while pid > 1 and pid not in chain and len(chain) < limit:
        chain.add(pid)
        pid = parent(pid, proc) or 0
    return chain
