"""What the link should give: a peak to hold nccl-tests' bus bandwidth against (NVLink, PCIe, NIC, InfiniBand)."""
from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from typing import Mapping

from gpudoctor.probes import hostinfo, nic

# GB/s per lane and direction after line coding (PCIe 3.0 onward uses 128b/130b)
PCIE_GBS_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
HEALTHY_FRACTION = 0.5  # busbw on a healthy link reaches well past half its peak at large messages
BANDWIDTH_REGIME_BYTES = 16 << 20  # below this, latency dominates and busbw says little about the link


@dataclass(frozen=True)
class Link:
    name: str
    peak_gbs: float  # one direction, GB/s (1e9 bytes), the unit nccl-tests reports busbw in


def parse_nvlink_status(text: str) -> float:
    """Sum of one GPU's active link speeds from `nvidia-smi nvlink -s -i 0` ("Link 0: 26.562 GB/s")."""
    return sum(float(m.group(1)) for m in re.finditer(r"Link\s+\d+:\s*([0-9.]+)\s*GB/s", text))


def nvlink_peak(options: Mapping) -> Link | None:
    out = hostinfo.run_command(options, ["nvidia-smi", "nvlink", "-s", "-i", "0"])
    if out and out.returncode == 0:
        total = parse_nvlink_status(out.stdout)
        if total > 0:
            links = len(re.findall(r"Link\s+\d+:\s*[0-9.]+\s*GB/s", out.stdout))
            return Link(f"NVLink ({links} links on GPU 0)", total)
    return None


def pcie_peak(options: Mapping) -> Link | None:
    out = hostinfo.run_command(options, ["nvidia-smi", "--query-gpu=pcie.link.gen.max,pcie.link.width.max",
                                         "--format=csv,noheader,nounits"])
    if not out or out.returncode != 0 or not out.stdout.strip():
        return None
    try:
        gen, width = (int(v) for v in out.stdout.splitlines()[0].split(","))
    except ValueError:
        return None
    per_lane = PCIE_GBS_PER_LANE.get(gen)
    return Link(f"PCIe gen{gen} x{width}", per_lane * width) if per_lane else None


def network_peak(options: Mapping, env: Mapping[str, str], backend: str, master_addr: str | None) -> Link | None:
    """The node's inter-node bandwidth: NCCL's IB ports together, else the socket interface in use."""
    interfaces = nic.read_interfaces(options)
    if backend == "nccl":
        ports = nic.nccl_ib_selection(nic.read_ib_ports(options), env)
        rates = [p.gbps for p in ports if p.gbps]
        if rates:
            return Link(f"InfiniBand {', '.join(f'{p.device}:{p.port}' for p in ports)}", sum(rates) / 8)
        chosen, _ = nic.nccl_socket_selection(interfaces, env)
    else:
        names = [n for n in env.get("GLOO_SOCKET_IFNAME", "").split(",") if n]
        chosen = [i for i in interfaces if i.name in names] or _route_interfaces(interfaces, master_addr)
    speeds = [i.speed_mbps for i in chosen[:1] if i.speed_mbps]
    if speeds:
        return Link(f"{chosen[0].name} at {speeds[0] // 1000} Gb/s", speeds[0] / 8000)
    return None


def _route_interfaces(interfaces, master_addr: str | None):
    if not master_addr:
        return []
    try:
        address = socket.getaddrinfo(master_addr, None, socket.AF_INET)[0][4][0]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((address, 9))
            local = sock.getsockname()[0]
    except (OSError, IndexError):
        return []
    return [i for i in interfaces if local in i.addresses]


def expected_link(options: Mapping, env: Mapping[str, str], backend: str, multi_node: bool,
                  master_addr: str | None) -> tuple[Link | None, str]:
    """(link, why) for the path this all_reduce takes; None where no fair reference exists."""
    if multi_node:
        link = network_peak(options, env, backend, master_addr)
        return link, "" if link else "link speed unknown (the NIC does not report one)"
    if backend == "nccl":
        link = nvlink_peak(options) or pcie_peak(options)
        return link, "" if link else "no NVLink or PCIe figures from nvidia-smi"
    return None, "no reference for gloo within one host (loopback and shared memory, bound by CPU)"


def verdict(busbw_gbs: float, link: Link) -> tuple[bool, str]:
    fraction = busbw_gbs / link.peak_gbs if link.peak_gbs else 0.0
    healthy = fraction >= HEALTHY_FRACTION
    word = "normal" if healthy else "low: traffic takes a slower path than this link"
    return healthy, f"busbw {busbw_gbs:.2f} GB/s is {fraction:.0%} of {link.name} ({link.peak_gbs:.1f} GB/s): {word}"
