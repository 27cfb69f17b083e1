"""/dev/shm (D24): its size and free space, and the NCCL segments a crashed run left in it."""
from __future__ import annotations

import os
import re
from typing import Mapping

from gpudoctor.probes import hostinfo
from gpudoctor.probes.base import Result, confirmed, inconclusive, ruled_out

MIB = 1 << 20
# several MB per pair of local ranks and channel: an 8-GPU job's SHM transport wants hundreds of MB, and DataLoader
# workers share batches through the same tmpfs. Docker's default is 64 MiB.
MIN_SIZE = 1 << 30
MIN_FREE = 512 * MIB
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def probe(options: Mapping) -> Result:
    mount = shm_mount(options)
    if mount is None:
        return inconclusive("no /dev/shm mount in /proc/mounts (not Linux, or /proc is not readable)",
                            entries=("D24",))
    fstype, size = mount
    path = hostinfo.under_root(options, "/dev/shm")
    total, free = _space(path) if str(hostinfo.sys_root(options)) == "/" else (None, None)
    size = total if size is None else size
    stale, stale_bytes = nccl_segments(path)
    figures = {"fstype": fstype, "size_bytes": size, "free_bytes": free, "nccl_segments": stale,
               "nccl_segment_bytes": stale_bytes}
    evidence = [f"/dev/shm: {fstype}, size {_mib(size)}" + (f", {_mib(free)} free" if free is not None else "")]
    if stale:
        evidence.append(f"{stale} NCCL segment file(s) (nccl-*) hold {_mib(stale_bytes)}: a crashed run leaves "
                        f"them behind; remove them when no job is running (rm -f /dev/shm/nccl-*)")
    if size is not None and size < MIN_SIZE:
        return confirmed(f"/dev/shm is only {_mib(size)}: NCCL's shared-memory transport needs hundreds of MB with "
                         f"several GPUs; start the container with --shm-size=16g or --ipc=host", evidence, figures,
                         ("D24",))
    if free is not None and free < MIN_FREE:
        return confirmed(f"/dev/shm has only {_mib(free)} free of {_mib(size)}", evidence, figures, ("D24",))
    if size is None:
        return inconclusive("/dev/shm is mounted but its size could not be read", evidence, figures, ("D24",))
    return ruled_out(f"/dev/shm is {_mib(size)}" + (f" with {_mib(free)} free" if free is not None else ""),
                     evidence, figures, ("D24",))


def shm_mount(options: Mapping) -> tuple[str, int | None] | None:
    """(filesystem type, size from the mount's size= option or None) of /dev/shm's mount."""
    for point, fstype, opts in hostinfo.mounts(options):
        if point == "/dev/shm":
            return fstype, next((parse_size(o[5:]) for o in opts if o.startswith("size=")), None)
    return None


def parse_size(text: str) -> int | None:
    """A tmpfs size= value ("65536k", "16g", "1073741824") in bytes; a percentage of RAM gives None."""
    m = re.fullmatch(r"(\d+)([kmgt]?)", text.strip().lower())
    return int(m.group(1)) * _UNITS[m.group(2)] if m else None


def nccl_segments(path) -> tuple[int, int]:
    """How many nccl-* files /dev/shm holds, and their bytes."""
    count = total = 0
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name.startswith("nccl-") and entry.is_file(follow_symlinks=False):
                    count += 1
                    total += entry.stat(follow_symlinks=False).st_size
    except OSError:
        pass
    return count, total


def _space(path) -> tuple[int | None, int | None]:
    """(total, available) bytes of the filesystem at path; (None, None) where it cannot be read."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None, None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def _mib(value: int | None) -> str:
    if value is None:
        return "?"
    return f"{value / (1 << 30):.1f} GiB" if value >= 1 << 30 else f"{value // MIB} MiB"
