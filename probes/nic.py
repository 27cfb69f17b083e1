"""Network interfaces (MN2): what NCCL_SOCKET_IFNAME selects under NCCL's rules, and whether that is the fast NIC."""
from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Mapping

from gpudoctor.probes import hostinfo
from gpudoctor.probes.base import Result, confirmed, inconclusive, ruled_out

ARPHRD_LOOPBACK, ARPHRD_INFINIBAND = 772, 32
SLOW_MBPS = 10_000  # below 10 Gb/s an inter-node all_reduce is starved (MN2's "1 GbE management NIC")
MAX_SOCKET_IFS = 16  # NCCL's MAX_IFS: the socket transport uses up to this many matches; bootstrap the first


@dataclass(frozen=True)
class Interface:
    name: str
    index: int
    state: str
    mtu: int | None
    speed_mbps: int | None  # None: the driver does not say (virtio, down links)
    kind: str  # loopback / ether / infiniband / other
    virtual: bool  # no backing device: bridges, veth, docker0, lo
    bridge: bool
    addresses: tuple[str, ...] = field(default=())

    @property
    def up(self) -> bool:
        return self.state in ("up", "unknown")  # lo and some tunnels report "unknown" while working

    @property
    def suspicious(self) -> str | None:
        """Why NCCL traffic over this interface would not reach another node, or crawl."""
        if self.kind == "loopback" or self.name == "lo":
            return "loopback"
        for prefix, what in (("docker", "docker bridge"), ("virbr", "libvirt bridge"), ("veth", "container veth"),
                             ("br-", "docker network bridge"), ("cni", "CNI bridge"), ("flannel", "overlay"),
                             ("tun", "tunnel"), ("tailscale", "VPN tunnel"), ("wg", "VPN tunnel")):
            if self.name.startswith(prefix):
                return what
        if self.bridge:
            return "bridge"
        return None


@dataclass(frozen=True)
class IBPort:
    device: str
    port: int
    state: str
    rate: str
    link_layer: str

    @property
    def active(self) -> bool:
        return "ACTIVE" in self.state.upper()

    @property
    def gbps(self) -> float | None:
        try:
            return float(self.rate.split()[0])
        except (ValueError, IndexError):
            return None


def read_interfaces(options: Mapping) -> list[Interface]:
    base = hostinfo.under_root(options, "/sys/class/net")
    addresses = _addresses(options)
    found = []
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    for path in entries:
        read = lambda name: hostinfo.read_text(path / name)  # noqa: E731
        speed = _int(read("speed"))
        kinds = {ARPHRD_LOOPBACK: "loopback", ARPHRD_INFINIBAND: "infiniband", 1: "ether"}
        kind = kinds.get(_int(read("type")), "other")
        found.append(Interface(
            name=path.name, index=_int(read("ifindex")) or 0, state=(read("operstate") or "unknown").lower(),
            mtu=_int(read("mtu")), speed_mbps=speed if speed and speed > 0 else None, kind=kind,
            virtual=not (path / "device").exists(), bridge=(path / "bridge").is_dir(),
            addresses=tuple(addresses.get(path.name, ())) if addresses is not None else ("?",),
        ))
    return sorted(found, key=lambda i: (i.index, i.name))


def _addresses(options: Mapping) -> dict[str, list[str]] | None:
    """name -> addresses; None when unknowable (a fabricated /sys tree without options['addresses'])."""
    if options.get("addresses") is not None:
        return {k: list(v) for k, v in options["addresses"].items()}
    if str(hostinfo.sys_root(options)) != "/":
        return None
    try:
        import psutil

        return {name: [a.address.split("%")[0] for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)]
                for name, addrs in psutil.net_if_addrs().items()}
    except ImportError:
        pass
    out = hostinfo.run_command(options, ["ip", "-o", "addr", "show"])
    result: dict[str, list[str]] = {}
    for line in (out.stdout.splitlines() if out and out.returncode == 0 else []):
        parts = line.split()
        if len(parts) > 3 and parts[2] in ("inet", "inet6"):
            result.setdefault(parts[1], []).append(parts[3].split("/")[0])
    return result


def read_ib_ports(options: Mapping) -> list[IBPort]:
    base = hostinfo.under_root(options, "/sys/class/infiniband")
    ports = []
    try:
        devices = sorted(base.iterdir())
    except OSError:
        return []
    for device in devices:
        try:
            port_dirs = sorted((device / "ports").iterdir())
        except OSError:
            continue
        for port in port_dirs:
            ports.append(IBPort(device.name, _int(port.name) or 0, hostinfo.read_text(port / "state", "") or "",
                                hostinfo.read_text(port / "rate", "") or "",
                                hostinfo.read_text(port / "link_layer", "") or ""))
    return ports


def match_list(spec: str, name: str, port: int | None = None) -> bool:
    """NCCL's matchIfList with its prefixes: '^' excludes, '=' matches whole names; 'name:port' pins a port."""
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    items = [item for item in spec.split(",") if item]
    if not items:
        return not exclude
    hit = False
    for item in items:
        prefix, _, want_port = item.partition(":")
        name_ok = name == prefix if exact else name.startswith(prefix)
        port_ok = not want_port or port is None or str(port) == want_port
        if name_ok and port_ok:
            hit = True
            break
    return hit != exclude


def _family_ok(address: str, family: str | None) -> bool:
    if address == "?":
        return True
    if family == "AF_INET":
        return ":" not in address
    if family == "AF_INET6":
        return ":" in address
    return True


def _ordered_candidates(interfaces: list[Interface], family: str | None) -> list[Interface]:
    """getifaddrs order as NCCL walks it: interfaces with IPv4 first, then IPv6-only ones; ::1 never counts."""
    def usable(i: Interface, want_v6: bool) -> bool:
        return any(_family_ok(a, family) and (a == "?" or (":" in a) == want_v6) and a != "::1" for a in i.addresses)

    v4 = [i for i in interfaces if usable(i, False)]
    v6 = [i for i in interfaces if usable(i, True) and i not in v4]
    return v4 + v6


def nccl_socket_selection(interfaces: list[Interface], env: Mapping[str, str]) -> tuple[list[Interface], str]:
    """The interfaces NCCL's socket code would use, and which rule chose them (ncclFindInterfaces)."""
    candidates = _ordered_candidates(interfaces, env.get("NCCL_SOCKET_FAMILY"))
    spec = env.get("NCCL_SOCKET_IFNAME", "")
    if len(spec) > 1:  # NCCL ignores a one-character value
        return [i for i in candidates if match_list(spec, i.name)][:MAX_SOCKET_IFS], f"NCCL_SOCKET_IFNAME={spec}"
    for rule in ("ib", "^docker,lo,virbr", "docker", "lo", "virbr"):
        chosen = [i for i in candidates if match_list(rule, i.name)]
        if chosen:
            return chosen[:MAX_SOCKET_IFS], f"NCCL's automatic choice (rule {rule!r}; NCCL_SOCKET_IFNAME unset)"
    return [], "NCCL's automatic choice found no interface with an address"


def nccl_ib_selection(ports: list[IBPort], env: Mapping[str, str]) -> list[IBPort]:
    if env.get("NCCL_IB_DISABLE", "0").strip() == "1":
        return []
    spec = env.get("NCCL_IB_HCA", "")
    return [p for p in ports if p.active and (not spec or match_list(spec, p.device, p.port))]


def describe(interface: Interface) -> str:
    """One line per interface: name, state, MTU, speed, first address, and why it is suspect."""
    speed = interface.speed_mbps
    speed_text = (f"{speed // 1000} Gb/s" if speed >= 1000 else f"{speed} Mb/s") if speed else "? Gb/s"
    known = [a for a in interface.addresses if a != "?"]
    address = (known[0] + (f" +{len(known) - 1}" if len(known) > 1 else "")) if known else (
        "?" if interface.addresses else "no address")
    notes = interface.suspicious or ("virtual" if interface.virtual else "")
    return (f"{interface.name[:10]:<10} {interface.state[:7]:<7} mtu {interface.mtu or '?':<5} {speed_text:<8} "
            f"{address[:24]:<24} {notes}").rstrip()


def probe(options: Mapping) -> Result:
    env = hostinfo.environ(options)
    interfaces = read_interfaces(options)
    if not interfaces:
        return inconclusive(f"no interfaces under {hostinfo.under_root(options, '/sys/class/net')}")
    job = hostinfo.job_from_env(env)
    multi_node = bool(options.get("multinode") or options.get("peer") or (job and job.multi_node))
    selected, rule = nccl_socket_selection(interfaces, env)
    ports = read_ib_ports(options)
    ib_used = nccl_ib_selection(ports, env)
    evidence = [describe(i) for i in interfaces]
    evidence.append(f"{rule}: " + (", ".join(i.name for i in selected) or "nothing"))
    evidence += [f"IB {p.device}:{p.port} {p.state} {p.rate} {p.link_layer}".rstrip() for p in ports]
    figures = {"selected": [i.name for i in selected], "ib_selected": [f"{p.device}:{p.port}" for p in ib_used],
               "interfaces": {i.name: {"mtu": i.mtu, "speed_mbps": i.speed_mbps, "state": i.state}
                              for i in interfaces}}
    problems = selection_problems(interfaces, selected, ports, ib_used, env)
    gloo = env.get("GLOO_SOCKET_IFNAME")
    if gloo:
        missing = [n for n in gloo.split(",") if n and n not in {i.name for i in interfaces}]
        if missing:
            problems.append(f"GLOO_SOCKET_IFNAME names {', '.join(missing)}, which does not exist here")
    if not problems:
        main = selected[0].name if selected else "none"
        via = f"; NCCL uses IB {', '.join(f'{p.device}:{p.port}' for p in ib_used)}" if ib_used else ""
        return ruled_out(f"NCCL would bootstrap over {main}{via}", evidence, figures, ("MN2",))
    evidence += [f"MN2: {p}" for p in problems]
    if multi_node:
        return confirmed(problems[0], evidence, figures, ("MN2",))
    # on one node NCCL bootstraps fine over lo or a slow port (the data goes over P2P or shared memory); only a
    # setting that names no usable interface fails there too
    fatal = [p for p in problems if "NCCL init fails" in p or "does not exist here" in p or " is selected but " in p]
    if fatal:
        return confirmed(fatal[0], evidence, figures, ("MN2",))
    return inconclusive(problems[0] + " (fine on one node; matters once the job spans nodes: --multinode to judge "
                        "it so)", evidence, figures, ("MN2",))


def selection_problems(interfaces, selected, ports, ib_used, env) -> list[str]:
    problems = []
    spec = env.get("NCCL_SOCKET_IFNAME", "")
    good = [i for i in interfaces if i.up and not i.suspicious and not i.virtual and i.addresses]
    if len(spec) > 1 and not selected:
        problems.append(f"NCCL_SOCKET_IFNAME={spec} matches no interface with an address: NCCL init fails")
    if selected:
        first = selected[0]
        if first.suspicious and good:
            problems.append(f"NCCL would bootstrap over {first.name} ({first.suspicious}) although "
                            f"{good[0].name} is available: set NCCL_SOCKET_IFNAME={good[0].name}")
        elif first.suspicious:
            problems.append(f"the only interface NCCL finds is {first.name} ({first.suspicious}): "
                            "no other node can reach it")
        for iface in selected:
            if not iface.up:
                problems.append(f"{iface.name} is selected but {iface.state}")
        fastest = max((i.speed_mbps or 0 for i in good), default=0)
        slow = [i for i in selected if i.speed_mbps and i.speed_mbps < SLOW_MBPS and fastest > i.speed_mbps]
        if slow and not ib_used:
            problems.append(f"{slow[0].name} runs at {slow[0].speed_mbps} Mb/s while a {fastest // 1000} Gb/s "
                            "interface is present")
    active = [p for p in ports if p.active]
    hca = env.get("NCCL_IB_HCA", "")
    if active and env.get("NCCL_IB_DISABLE", "0").strip() == "1":
        problems.append(f"NCCL_IB_DISABLE=1 although {active[0].device} is ACTIVE ({active[0].rate}): "
                        "inter-node traffic falls back to sockets")
    elif active and hca and not ib_used:
        problems.append(f"NCCL_IB_HCA={hca} matches none of the active HCAs "
                        f"({', '.join(p.device for p in active)}): NCCL falls back to sockets")
    return problems


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
