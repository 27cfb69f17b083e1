"""The GPUs' peer-to-peer path (D25): what the driver advertises, whether the IOMMU translates, and a real copy."""
from __future__ import annotations

import re
import threading
from typing import Mapping

from gpudoctor.probes import hostinfo
from gpudoctor.probes.base import Result, confirmed, inconclusive, ruled_out, skipped

COPY_BYTES = 64 << 20
COPY_TIMEOUT_S = 10.0
# nvidia-smi topo -p2p r: "OK" where peer reads work, else why not (CNS chipset, GNS GPU, TNS topology, NS, U)
_CELL = re.compile(r"^(X|OK|CNS|GNS|TNS|NS|U)$")


def probe(options: Mapping) -> Result:
    out = hostinfo.run_command(options, ["nvidia-smi", "topo", "-p2p", "r"])
    matrix = out.stdout if out and out.returncode == 0 else ""
    if len(matrix_gpus(matrix)) == 1:
        return skipped("one GPU on this machine: there is no peer-to-peer path between GPUs to test",
                       ["nvidia-smi topo -p2p r lists GPU0 alone"], {"pairs": {}})
    pairs = parse_p2p_matrix(matrix)
    cmdline = hostinfo.read_text(hostinfo.under_root(options, "/proc/cmdline")) or ""
    env = hostinfo.environ(options)
    copy = None
    if not options.get("no_copy") and any(status == "OK" for status in pairs.values()):
        a, b = next(pair for pair, status in pairs.items() if status == "OK")
        copy = peer_copy(a, b)
    return judge(pairs, cmdline, env, copy)


def judge(pairs: dict, cmdline: str, env: Mapping[str, str], copy: dict | None) -> Result:
    """The verdict from the advertised matrix, the kernel command line, the environment and a copy test's outcome
    ({"pair": (a, b), "ok": bool, "why": str}, or None when none could run)."""
    evidence, figures = [], {"pairs": {f"{a}-{b}": s for (a, b), s in sorted(pairs.items())}}
    advertised = sorted(pair for pair, status in pairs.items() if status == "OK")
    if pairs:
        evidence.append(f"peer reads advertised for {len(advertised)} of {len(pairs)} GPU pairs"
                        + (f" (first: GPU{advertised[0][0]}-GPU{advertised[0][1]})" if advertised else ""))
    iommu = iommu_mode(cmdline)
    figures["iommu"] = iommu
    if iommu:
        evidence.append(f"kernel command line: IOMMU {iommu}")
    disabled = env.get("NCCL_P2P_DISABLE", "").strip() in ("1", "true", "True")
    if disabled:
        evidence.append("NCCL_P2P_DISABLE=1 is set: NCCL will not use peer-to-peer here")
    if copy is not None:
        a, b = copy["pair"]
        figures["copy"] = {"pair": [a, b], "ok": copy["ok"], "why": copy.get("why", "")}
        if not copy["ok"]:
            return confirmed(f"a {COPY_BYTES >> 20} MiB copy from GPU{a} to GPU{b} over peer access failed: "
                             f"{copy.get('why', 'wrong data')}; NCCL_P2P_DISABLE=1 avoids the path, the platform "
                             f"(ACS, IOMMU, driver, NVLink) needs fixing", evidence, figures, ("D25",))
        evidence.append(f"GPU{a} -> GPU{b}: {COPY_BYTES >> 20} MiB peer copy arrived intact")
        return ruled_out(f"peer copies between GPU{a} and GPU{b} work", evidence, figures, ("D25",))
    if pairs and not advertised:
        return ruled_out("no GPU pair advertises peer access: NCCL goes through host memory here, so a broken "
                         "peer-to-peer path cannot hang it", evidence, figures, ("D25",))
    if advertised and iommu == "translating" and not disabled:
        return inconclusive("peer access is advertised while the IOMMU translates DMA: the setting that blocks "
                            "peer traffic on many hosts; run this probe where torch sees the GPUs to test a copy",
                            evidence, figures, ("D25",))
    return inconclusive("no peer copy could be tried (torch with CUDA and two GPUs are needed)", evidence, figures,
                        ("D25",))


def matrix_gpus(text: str) -> list[int]:
    """The GPU indices heading `nvidia-smi topo -p2p r`'s matrix ([] when there is none)."""
    for line in text.splitlines():
        cells = line.split()
        if cells and all(re.fullmatch(r"GPU\d+", c) for c in cells):
            return [int(c[3:]) for c in cells]
    return []


def parse_p2p_matrix(text: str) -> dict[tuple[int, int], str]:
    """{(i, j): status} for i < j from `nvidia-smi topo -p2p r`'s matrix."""
    pairs: dict[tuple[int, int], str] = {}
    header = matrix_gpus(text)
    for line in text.splitlines():
        cells = line.split()
        if not cells:
            continue
        if header and re.fullmatch(r"GPU\d+", cells[0]) and len(cells) - 1 == len(header):
            row = int(cells[0][3:])
            for col, status in zip(header, cells[1:]):
                if _CELL.match(status) and status != "X" and row < col:
                    pairs[(row, col)] = status
    return pairs


def iommu_mode(cmdline: str) -> str:
    """"translating" (intel_iommu=on / amd_iommu=on without iommu=pt), "passthrough", "off" or "" (not set)."""
    words = cmdline.split()
    if "iommu=pt" in words or "iommu.passthrough=1" in words:
        return "passthrough"
    if any(w in ("intel_iommu=on", "amd_iommu=on", "amd_iommu=force_isolation") for w in words):
        return "translating"
    if any(w in ("intel_iommu=off", "amd_iommu=off", "iommu=off") for w in words):
        return "off"
    return ""


def peer_copy(a: int, b: int) -> dict | None:
    """Copy a filled buffer from GPU a to GPU b with peer access and check it, within COPY_TIMEOUT_S; None without
    torch or CUDA. A copy that never finishes is reported as such (the runner kills the probe if CUDA blocks)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available() or torch.cuda.device_count() <= max(a, b):
        return None
    if not torch.cuda.can_device_access_peer(a, b):
        return {"pair": (a, b), "ok": True, "why": "torch reports no peer access: NCCL will not use it"}
    outcome: dict = {"pair": (a, b), "ok": False, "why": f"the copy did not finish in {COPY_TIMEOUT_S:g} s"}

    def run() -> None:
        src = torch.arange(COPY_BYTES // 4, dtype=torch.int32, device=f"cuda:{a}")
        dst = src.to(f"cuda:{b}")
        torch.cuda.synchronize(b)
        same = bool(torch.equal(dst.cpu(), src.cpu()))
        outcome.update(ok=same, why="" if same else "the data arrived changed")

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(COPY_TIMEOUT_S)
    return outcome
