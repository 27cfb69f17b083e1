"""nccl-tests (and rccl-tests) that stopped on one host before a single result row: the GPUs' peer path (D25).

nccl-tests prints its devices, then a row per message size once that size's collective completed
(src/common.cu: "#   Rank %2d Pid %6d on %10s device %2d [%s] %s", then the table header and the rows). On one
host nothing but the GPUs and the path between them takes part: no rendezvous, no network, no training code. A run
that printed its devices and no row, with no error, hangs in the first collective, which on one host is a broken
peer-to-peer path (PCIe ACS or the IOMMU redirecting P2P traffic, a P2P level the topology does not carry). On
NVSwitch machines (SXM/HGX boards) a stopped fabric manager hangs the first collective the same way, so there the
reading is MN1, and only a possible one.
"""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy

_DEVICE = _lazy(r"^#\s+Rank\s+\d+\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s*(.*)$")
# a result row: size, count, type, redop ... (rows start with spaces and a number; the header lines with "#")
_ROW = _lazy(r"^\s+\d+\s+\d+\s+(?:float|half|double|bfloat16|int8|uint8|int32|uint32|int64|uint64|fp8\w*)\s+\w+\s")
_FAILED = _lazy(r"NCCL WARN|Test (?:NCCL|CUDA|HIP) failure|\berror\b|Error\b|failed|Aborted|Segmentation|Bus error|"
                r"Out of bounds values|FAILED")
# NCCL's own notes that a plugin or verbs library is absent: it falls back to sockets and goes on
_BENIGN = _lazy(r"libibverbs|NET/Plugin|No plugin found|libnccl-net")
_NVSWITCH = _lazy(r"SXM|HGX|DGX|H100 80GB HBM3|\bH800\b|\bH200\b|\bB200\b|\bGB200\b|\bB100\b")
SCORE = 0.75


def stopped_tests_rule(text: str, file: str) -> list:
    """D25 (MN1 on NVSwitch boards, as a possible cause) for nccl-tests output from one host with no result row."""
    if "# Using devices" not in text:
        return []
    from gpudoctor.engine.rules import Verdict
    from gpudoctor.engine.textfind import line_text, lines_with

    devices = [(n, line) for n, line in lines_with(text, " Pid ") if _DEVICE.search(line)]
    if len(devices) < 2 or any(not _BENIGN.search(line_text(text, m.start())) for m in _FAILED.finditer(text)):
        return []
    hosts = {_DEVICE.search(line).group(1) for _, line in devices}
    if len(hosts) != 1 or any(_ROW.search(line) for line in text.splitlines()):
        return []
    names = " ".join(_DEVICE.search(line).group(2) for _, line in devices)
    n, first = devices[0]
    here = Evidence(file, n, first.strip(), "rule:tests-stopped-before-a-row")
    if _NVSWITCH.search(names):
        note = (f"line {n}: nccl-tests on one NVSwitch host printed its {len(devices)} devices and no result: the "
                f"first collective never completed; on these boards a stopped fabric manager does that (MN1)")
        return [Verdict("MN1", "rule:tests-stopped-before-a-row", (here,), score=0.5, tier="possible", note=note)]
    note = (f"line {n}: nccl-tests on one host printed its {len(devices)} devices and no result, with no error: the "
            f"first collective never completed, and on one host only the GPUs' peer path takes part (D25: PCIe ACS, "
            f"the IOMMU, NCCL_P2P_LEVEL)")
    return [Verdict("D25", "rule:tests-stopped-before-a-row", (here,), score=SCORE, note=note)]
