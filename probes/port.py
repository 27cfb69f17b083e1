"""The rendezvous port (D4): can MASTER_PORT be bound here; if not, who holds it and which port is free instead."""
from __future__ import annotations

import errno
import os
import socket
from pathlib import Path
from typing import Mapping

from gpudoctor.probes import hostinfo, procfs
from gpudoctor.probes.base import Result, confirmed, inconclusive, ruled_out, skipped

DEFAULT_PORT = 29500  # torchrun's and torch.distributed's default MASTER_PORT


def probe(options: Mapping) -> Result:
    env = hostinfo.environ(options)
    raw = options.get("port") or env.get("MASTER_PORT") or DEFAULT_PORT
    try:
        port = int(raw)
    except ValueError:
        port = 0
    if not 0 < port < 65536:  # a typo in the launch script: every rank fails to bind or connect (no entry names it)
        return confirmed(f"MASTER_PORT={raw!r} is not a port number (1-65535)")
    source = "--port" if options.get("port") else ("MASTER_PORT" if env.get("MASTER_PORT") else "the default")
    figures = {"port": port}
    addr = env.get("MASTER_ADDR", "").strip()
    if addr and not options.get("port") and resolves(addr) is False:
        return confirmed(f"MASTER_ADDR={addr} does not resolve on this host: no rank here can reach the store",
                         (f"getaddrinfo({addr!r}) found no address",), figures, ("D2",))
    if addr and not options.get("port") and not is_this_host(addr):
        # only the rendezvous host binds MASTER_PORT: on a worker a listener on that port is harmless, and the
        # advice to take another (or localhost:0) would split a multi-node job
        return skipped(f"MASTER_ADDR={addr} is another host: only it binds port {port}; run this probe there",
                       figures=figures)
    error = bind_error(port)
    if error is None:
        return ruled_out(f"port {port} ({source}) is free on this host", figures=figures, entries=("D4",))
    holders = listening_processes(port)
    figures["holders"] = [{"pid": pid, "cmdline": cmd} for pid, cmd in holders]
    evidence = [f"bind({port}) failed: {error}"]
    evidence += [f"held by pid {pid}: {cmd or '(command line not readable)'}" for pid, cmd in holders]
    ours = _launcher_among(holders)
    if ours is not None and hostinfo.job_from_env(env) is not None:
        return ruled_out(f"port {port} held by this job's own launcher (pid {ours})",
                         evidence, figures, ("D4",))
    free = free_port_near(port)
    figures["free_port"] = free
    if free:
        evidence.append(f"free now: {free}; use --master-port={free} (and disjoint CUDA_VISIBLE_DEVICES), "
                        "or --rdzv-endpoint=localhost:0 to let torchrun pick")
    if error.errno not in (errno.EADDRINUSE, errno.EACCES):
        return inconclusive(f"port {port} cannot be bound: {error.strerror}", evidence, figures, ("D4",))
    if not holders:
        evidence.append("no listener visible to this user (run as root to name the process)")
        who = "another process"
    else:
        pid, cmd = holders[0]
        who = f"pid {pid} ({_short(cmd)})" if cmd else f"pid {pid}"
    return confirmed(f"port {port} is in use by {who}", evidence, figures, ("D4",))


def resolves(addr: str) -> bool:
    try:
        socket.getaddrinfo(addr, None)
    except (OSError, UnicodeError):
        return False
    return True


def is_this_host(addr: str) -> bool:
    """Whether MASTER_ADDR names this machine: localhost, a loopback address, this host's name, or an address one of
    its interfaces holds. A name that does not resolve counts as this host (the bind check still tells something)."""
    if addr in ("localhost", "127.0.0.1", "::1", "0.0.0.0") or addr.startswith("127."):
        return True
    names = {socket.gethostname(), socket.getfqdn()}
    if addr in names or addr.split(".")[0] in {n.split(".")[0] for n in names}:
        return True
    try:
        wanted = {info[4][0] for info in socket.getaddrinfo(addr, None)}
    except (OSError, UnicodeError):
        return True
    if any(a.startswith("127.") or a == "::1" for a in wanted):
        return True
    for a in wanted:  # an address of this host's: binding to it succeeds only here
        family = socket.AF_INET6 if ":" in a else socket.AF_INET
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as probe_socket:
                probe_socket.bind((a, 0))
            return True
        except OSError:
            continue
    return False


def bind_error(port: int) -> OSError | None:
    """None when a listener could take the port (as the c10d store would, with SO_REUSEADDR); the error otherwise."""
    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 on this host
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address, port))
            sock.listen(1)
        except OSError as exc:
            if family == socket.AF_INET6 and exc.errno == errno.EADDRNOTAVAIL:
                continue
            return exc
        finally:
            sock.close()
    return None


def free_port_near(port: int) -> int | None:
    """A port a second job can use: the next hundreds first (D4's habit), else any the kernel gives."""
    for candidate in [port + 100 * k for k in range(1, 11)] + [port + k for k in range(1, 11)]:
        if 1024 <= candidate < 65536 and bind_error(candidate) is None:
            return candidate
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("0.0.0.0", 0))
        return sock.getsockname()[1]


def listening_processes(port: int) -> list[tuple[int, str]]:
    """(pid, command line) of every process listening on the TCP port, as far as this user can see."""
    holders = _with_psutil(port)
    if holders is None:
        holders = _with_proc(port)
    return sorted(set(holders))


def _with_psutil(port: int) -> list[tuple[int, str]] | None:
    try:
        import psutil
    except ImportError:
        return None
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return None
    holders = []
    for conn in conns:
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
            holders.append((conn.pid, _cmdline(conn.pid)))
    return holders


def _with_proc(port: int) -> list[tuple[int, str]]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    holders = []
    if not inodes:
        return holders
    targets = {f"socket:[{inode}]" for inode in inodes}
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in targets for fd in (pid_dir / "fd").iterdir()):
                holders.append((int(pid_dir.name), _cmdline(int(pid_dir.name))))
        except OSError:
            continue
    return holders


def _cmdline(pid: int) -> str:
    return " ".join(procfs.command(pid))


def _launcher_among(holders: list[tuple[int, str]]) -> int | None:
    """A holder that is one of our ancestors: torchrun's agent holds MASTER_PORT for its workers."""
    ancestors = procfs.ancestors(os.getppid(), limit=16)
    for pid, _ in holders:
        if pid in ancestors:
            return pid
    return None


def _short(cmd: str, limit: int = 40) -> str:
    return cmd if len(cmd) <= limit else cmd[: limit - 3] + "..."
