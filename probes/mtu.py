"""The MTU path (MN4): interface MTUs here, and with a peer whether jumbo frames cross the path or are dropped."""
from __future__ import annotations

import re
import socket
from typing import Mapping

from gpudoctor.probes import hostinfo
from gpudoctor.probes.base import Result, confirmed, inconclusive, ruled_out, skipped
from gpudoctor.probes.nic import Interface, read_interfaces

IP_ICMP_HEADERS = 28  # 20 bytes IPv4 + 8 bytes ICMP: ping -s 8972 fills a 9000-byte frame
STANDARD_MTU = 1500


def probe(options: Mapping) -> Result:
    interfaces = [i for i in read_interfaces(options) if i.kind != "loopback" and i.name != "lo"]
    data = [i for i in interfaces if i.up and i.addresses and not i.virtual]
    evidence = [f"{i.name}: mtu {i.mtu or '?'} ({i.state}{', ' + i.suspicious if i.suspicious else ''})"
                for i in interfaces]
    figures = {"mtu": {i.name: i.mtu for i in interfaces}}
    mixed = _mixed_note(interfaces)
    peer = options.get("peer")
    if not peer:
        if mixed:
            return inconclusive(mixed + "; pass --peer HOST to test the path", evidence, figures, ("MN4",))
        mtus = sorted({i.mtu for i in data if i.mtu}) or ["?"]
        return skipped(f"no --peer HOST given; local MTU {'/'.join(map(str, mtus))}", evidence, figures)
    if hostinfo.which(options, "ping") is None:
        return skipped("ping is not installed (iputils-ping): cannot test the path", evidence, figures)
    try:
        address = socket.getaddrinfo(peer, None, socket.AF_INET)[0][4][0]
    except (OSError, IndexError) as exc:
        return inconclusive(f"cannot resolve peer {peer}: {exc}", evidence, figures, ("MN4",))
    iface = _route_interface(options, address, interfaces)
    mtu = (iface.mtu if iface and iface.mtu else STANDARD_MTU)
    figures.update({"peer": address, "interface": iface.name if iface else None, "interface_mtu": mtu})
    small = min(STANDARD_MTU, mtu) - IP_ICMP_HEADERS
    small_ok, small_text = _ping(options, address, small)
    evidence.append(f"ping -M do -s {small} {address}: {'ok' if small_ok else 'failed'} {small_text}".rstrip())
    if not small_ok:
        return inconclusive(f"{peer} does not answer {small}-byte pings (down, or ICMP blocked)",
                            evidence, figures, ("MN4",))
    if mtu <= STANDARD_MTU:
        return ruled_out(f"no jumbo frames on {iface.name if iface else 'the route'} (MTU {mtu}); "
                         f"{small + IP_ICMP_HEADERS}-byte frames reach {peer}", evidence, figures, ("MN4",))
    big = mtu - IP_ICMP_HEADERS
    big_ok, big_text = _ping(options, address, big)
    evidence.append(f"ping -M do -s {big} {address}: {'ok' if big_ok else 'failed'} {big_text}".rstrip())
    figures["jumbo_ok"] = big_ok
    if big_ok:
        return ruled_out(f"{mtu}-byte frames reach {peer} unfragmented", evidence, figures, ("MN4",))
    return confirmed(f"{mtu}-byte frames to {peer} are dropped while {small + IP_ICMP_HEADERS}-byte ones pass: "
                     f"an MTU mismatch on the path", evidence, figures, ("MN4",))


def _ping(options: Mapping, address: str, payload: int) -> tuple[bool, str]:
    out = hostinfo.run_command(options, ["ping", "-M", "do", "-s", str(payload), "-c", "2", "-i", "0.2",
                                         "-W", "1", address], timeout=6)
    if out is None:
        return False, "(ping missing)"
    text = (out.stdout + out.stderr).strip().splitlines()
    loss = next((line for line in text if "packet loss" in line), "")
    hint = next((line for line in text if re.search(r"too long|frag needed|mtu", line, re.I)), "")
    return out.returncode == 0, (hint or loss)[:70]


def _route_interface(options: Mapping, address: str, interfaces: list[Interface]) -> Interface | None:
    """The interface the kernel would send to `address` from (`ip route get`), or options['iface']."""
    by_name = {i.name: i for i in interfaces}
    if options.get("iface"):
        return by_name.get(options["iface"])
    out = hostinfo.run_command(options, ["ip", "route", "get", address])
    if out and out.returncode == 0:
        m = re.search(r"\bdev\s+(\S+)", out.stdout)
        if m and m.group(1) in by_name:
            return by_name[m.group(1)]
    try:  # no `ip`: the source address a UDP socket picks names the interface
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((address, 9))
            local = sock.getsockname()[0]
        return next((i for i in interfaces if local in i.addresses), None)
    except OSError:
        return None


def _mixed_note(interfaces: list[Interface]) -> str | None:
    """A jumbo NIC beside a 1500-byte bridge or veth: traffic from containers on that bridge hits MN4."""
    physical = [i for i in interfaces if i.up and not i.virtual and i.mtu]
    bridged = [i for i in interfaces if i.up and i.suspicious and i.mtu]
    for nic in physical:
        for other in bridged:
            if other.mtu != nic.mtu:
                return f"{nic.name} has MTU {nic.mtu} but {other.name} ({other.suspicious}) has {other.mtu}"
    mtus = {i.mtu for i in physical}
    if len(mtus) > 1:
        return "data interfaces disagree on MTU: " + ", ".join(f"{i.name} {i.mtu}" for i in physical)
    return None
