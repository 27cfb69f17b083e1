"""The fabric-manager probe (MN1): Skipped here, and the real commands' output read from stand-ins."""
from __future__ import annotations

import pytest

from sysfake import add_command, write
from gpudoctor.probes import fabric, registry, runner
from gpudoctor.probes.base import Status

SMI_Q = """
==============NVSMI LOG==============
Attached GPUs                             : 2
GPU 00000000:18:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Fabric
        State                             : {state}
        Status                            : {status}
GPU 00000000:2A:00.0
    Fabric
        State                             : Completed
        Status                            : Success
"""


def nvswitch_host(root, bin_dir, *, fm_version="535.104.05", service="active", state="Completed", status="Success"):
    write(root / "proc/driver/nvidia/version",
          "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n")
    write(root / "dev/nvidia-nvswitch0", "")
    write(root / "dev/nvidia-nvswitch1", "")
    add_command(bin_dir, "systemctl", f'echo {service}\n[ "{service}" = active ]\n')
    add_command(bin_dir, "nv-fabricmanager", f'echo "Fabric Manager version is : {fm_version}"\n')
    add_command(bin_dir, "nvidia-smi", "cat <<'EOF'\n" + SMI_Q.format(state=state, status=status) + "EOF\n")
    return {"sys_root": str(root), "bin_dir": str(bin_dir)}


def test_skipped_here_with_the_reason():
    if fabric.nvswitches({}):
        pytest.skip("this machine has NVSwitches: the fabric probe has real work to do here")
    result = runner.run_probe(registry.get("fabric"), {})
    assert result.status is Status.SKIPPED
    assert "NVIDIA driver" in result.summary or "NVSwitch" in result.summary


def test_a_driver_without_nvswitches_needs_no_fabric_manager(sysroot, bin_dir):
    write(sysroot / "proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15\n")
    result = fabric.probe({"sys_root": str(sysroot), "bin_dir": str(bin_dir)})
    assert result.status is Status.SKIPPED and "no NVSwitch" in result.summary
    assert result.figures["driver"] == "550.54.15"


def test_healthy_fabric(sysroot, bin_dir):
    result = fabric.probe(nvswitch_host(sysroot, bin_dir))
    assert result.status is Status.RULED_OUT, result
    assert result.figures["fabric_manager"] == result.figures["driver"] == "535.104.05"


def test_version_mismatch(sysroot, bin_dir):
    result = fabric.probe(nvswitch_host(sysroot, bin_dir, fm_version="535.86.10"))
    assert result.status is Status.CONFIRMED and result.entries == ("MN1",)
    assert "fabric manager 535.86.10 differs from driver 535.104.05" in result.summary


def test_stopped_service(sysroot, bin_dir):
    result = fabric.probe(nvswitch_host(sysroot, bin_dir, service="failed"))
    assert result.status is Status.CONFIRMED and "nvidia-fabricmanager is failed" in result.summary


def test_fabric_not_trained(sysroot, bin_dir):
    result = fabric.probe(nvswitch_host(sysroot, bin_dir, state="In Progress", status="N/A"))
    assert result.status is Status.CONFIRMED and "GPU 0 fabric state is In Progress" in result.summary


def test_fabric_states_parse():
    text = SMI_Q.format(state="Not Started", status="N/A")
    assert fabric.fabric_states(text) == [("Not Started", "N/A"), ("Completed", "Success")]
