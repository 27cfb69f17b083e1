"""The peer-to-peer probe (D25): skipped without GPUs here; the matrix, the IOMMU mode and the verdicts from
stand-ins and fabricated outcomes."""
from __future__ import annotations

import pytest
from sysfake import add_command, write

from gpudoctor.probes import hostinfo, p2p, registry, runner
from gpudoctor.probes.base import Status

# nvidia-smi topo -p2p r on a 4-GPU PCIe box: pairs 0-1 and 2-3 behind one switch each, the rest across sockets
MATRIX = """ \tGPU0\tGPU1\tGPU2\tGPU3\t
 GPU0\tX\tOK\tCNS\tCNS\t
 GPU1\tOK\tX\tCNS\tCNS\t
 GPU2\tCNS\tCNS\tX\tOK\t
 GPU3\tCNS\tCNS\tOK\tX\t

Legend:

  X    = Self
  OK   = Status Ok
  CNS  = Chipset not supported
  GNS  = GPU not supported
  TNS  = Topology not supported
  NS   = Not supported
  U    = Unknown
"""


def test_skipped_here_with_the_reason():
    if hostinfo.has_nvidia_driver({}):
        pytest.skip("this machine has an NVIDIA driver: the probe has real work to do here")
    result = runner.run_probe(registry.get("p2p"), {})
    assert result.status is Status.SKIPPED and "NVIDIA driver" in result.summary


# nvidia-smi 580.159.04 on a one-GPU H200 (bench/gpu/run.sh, 2026-11-28), escapes as it printed them into a file
ONE_GPU = " \t\x1b[4mGPU0\t\x1b[0m\n GPU0\tX\t\n\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n"
# the same driver's header on a four-GPU box: underlined from the first GPU to the end of the line
UNDERLINED = MATRIX.replace(" \tGPU0\tGPU1\tGPU2\tGPU3\t\n", " \t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\t\x1b[0m\n")


def test_one_gpu_has_no_path_to_test(bin_dir):
    add_command(bin_dir, "nvidia-smi", "printf '%b' '" + ONE_GPU.replace("\x1b", "\\033").replace("\t", "\\t")
                .replace("\n", "\\n") + "'\n")
    result = p2p.probe({"bin_dir": str(bin_dir), "no_copy": True, "env": {}})
    assert result.status is Status.SKIPPED and "one GPU" in result.summary, result


def test_underlined_header_as_nvidia_smi_prints_it(sysroot, bin_dir):
    add_command(bin_dir, "nvidia-smi", "printf '%b' '" + UNDERLINED.replace("\x1b", "\\033").replace("\t", "\\t")
                .replace("\n", "\\n") + "'\n")
    write(sysroot / "proc/cmdline", "BOOT_IMAGE=/vmlinuz quiet\n")
    result = p2p.probe({"sys_root": str(sysroot), "bin_dir": str(bin_dir), "no_copy": True, "env": {}})
    assert result.figures["pairs"]["0-1"] == "OK" and len(result.figures["pairs"]) == 6, result
    assert not any("\x1b" in line for line in (result.summary, *result.evidence))


def test_matrix_parse():
    assert p2p.parse_p2p_matrix(MATRIX) == {(0, 1): "OK", (0, 2): "CNS", (0, 3): "CNS", (1, 2): "CNS",
                                            (1, 3): "CNS", (2, 3): "OK"}
    assert p2p.parse_p2p_matrix("No devices were found\n") == {}


@pytest.mark.parametrize("cmdline, mode", [
    ("BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on", "translating"),
    ("BOOT_IMAGE=/vmlinuz amd_iommu=on iommu=pt", "passthrough"),
    ("BOOT_IMAGE=/vmlinuz intel_iommu=off", "off"),
    ("BOOT_IMAGE=/vmlinuz quiet", ""),
])
def test_iommu_mode(cmdline, mode):
    assert p2p.iommu_mode(cmdline) == mode


def test_stand_in_nvidia_smi_and_a_translating_iommu_without_torch_gpus(sysroot, bin_dir):
    add_command(bin_dir, "nvidia-smi", "cat <<'EOF'\n" + MATRIX + "EOF\n")
    write(sysroot / "proc/cmdline", "BOOT_IMAGE=/vmlinuz intel_iommu=on\n")
    result = p2p.probe({"sys_root": str(sysroot), "bin_dir": str(bin_dir), "no_copy": True, "env": {}})
    assert result.status is Status.INCONCLUSIVE and result.entries == ("D25",)
    assert "IOMMU translates" in result.summary
    assert result.figures["pairs"]["0-1"] == "OK" and result.figures["iommu"] == "translating"


def test_a_failed_peer_copy_confirms_and_a_good_one_rules_out():
    pairs = {(0, 1): "OK"}
    bad = p2p.judge(pairs, "", {}, {"pair": (0, 1), "ok": False, "why": "the copy did not finish in 10 s"})
    assert bad.status is Status.CONFIRMED and "GPU0 to GPU1" in bad.summary and "NCCL_P2P_DISABLE=1" in bad.summary
    good = p2p.judge(pairs, "", {}, {"pair": (0, 1), "ok": True, "why": ""})
    assert good.status is Status.RULED_OUT


def test_no_advertised_pair_rules_out():
    result = p2p.judge({(0, 1): "CNS"}, "", {"NCCL_P2P_DISABLE": "1"}, None)
    assert result.status is Status.RULED_OUT and "host memory" in result.summary
    assert any("NCCL_P2P_DISABLE=1 is set" in line for line in result.evidence)
