"""Which network interfaces NCCL says it uses, whether other nodes can reach them, and how many hosts took part."""
from __future__ import annotations

import re

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.textfind import lines_with

# "Bootstrap : Using eth0:10.0.0.1<0>", "NET/Socket : Using [0]docker0:172.17.0.2<0> [1]eth0:...",
# NCCL 2.4 and older: "NET : Using interface lo:127.0.0.1<0>"
_USING = _lazy(r"(?:Bootstrap|NET/Socket|NET)\s?:\s?Using (?:interface )?(.{1,2000})")
_IFACE = _lazy(r"(?:\[\d{1,3}\])?([A-Za-z][\w.@-]{0,40}:[0-9A-Fa-f:.%\w-]{2,80})<\d+>")
# NCCL's own prefix: "host:pid:tid [dev] NCCL INFO"
_NCCL_HOST = _lazy(r"(?:^|[\s\]])([\w.-]{1,253}):\d{1,10}:\d{1,10} \[\d{1,3}\] NCCL (?:INFO|WARN)", re.MULTILINE)
_VIRTUAL = (
    "docker", "virbr", "veth", "br-", "cni", "flannel", "cali", "tun", "tap", "vxlan", "weave", "kube-", "cilium",
    "lxc", "lxdbr", "podman", "vmnet", "vboxnet", "vnet", "zt", "tailscale", "wg", "dummy", "genev", "ovs-", "ip6tnl",
    "sit", "gre", "nodelocaldns", "utun",
)


def unreachable(name: str) -> bool:
    """Loopback or a container / VM / VPN / tunnel device, or an address on Docker's default bridge (a container's
    eth0 at 172.17.x.x): nothing on another node reaches it. name: "eth0" or "eth0:172.17.0.2"."""
    name, _, address = name.lower().partition(":")
    return bool(re.fullmatch(r"lo\d{0,3}", name)) or name.startswith(_VIRTUAL) or address.startswith("172.17.")


def interface_choices(text: str, file: str) -> list[tuple[Evidence, list[str]]]:
    """(the line, the interfaces in the order NCCL lists them) for each distinct socket interface choice."""
    out, seen = [], set()
    if "NCCL" not in text or ": Using" not in text and ":Using" not in text:
        return out
    for line_no, line in lines_with(text, "Using"):
        m = _USING.search(line)
        if m and "NET/IB" not in line:
            names = [i.group(1) for i in _IFACE.finditer(m.group(1))]
            key = tuple(names)
            if names and key not in seen:
                seen.add(key)
                out.append((Evidence(file, line_no, line, "rule:nccl-unreachable-interface"), names))
    return out


def hosts(text: str) -> set[str]:
    """Host names in NCCL's line prefixes."""
    found: set[str] = set()
    at = text.find(" NCCL ")
    while at >= 0 and len(found) < 64:
        start = text.rfind("\n", 0, at) + 1
        m = _NCCL_HOST.search(text, start, at + 12)
        if m:
            found.add(m.group(1))
        end = text.find("\n", at)
        if end < 0:
            break
        at = text.find(" NCCL ", end)
    return found
