"""The /dev/shm probe (D24) on fabricated /proc/mounts and /dev/shm trees, and on this machine."""
from __future__ import annotations

import pytest
from sysfake import write

from gpudoctor.probes import registry, runner, shm
from gpudoctor.probes.base import Status

DOCKER_DEFAULT = "shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k 0 0\n"


def _root(tmp_path, mounts: str):
    write(tmp_path / "proc/mounts", "overlay / overlay rw,relatime 0 0\n" + mounts)
    (tmp_path / "dev/shm").mkdir(parents=True, exist_ok=True)
    return {"sys_root": str(tmp_path)}


def test_docker_default_64_mib_is_confirmed_with_the_flags_that_fix_it(tmp_path):
    options = _root(tmp_path, DOCKER_DEFAULT)
    result = runner.run_probe(registry.get("shm"), options)
    assert result.status is Status.CONFIRMED and result.entries == ("D24",)
    assert "only 64 MiB" in result.summary and "--shm-size" in result.summary and "--ipc=host" in result.summary
    assert result.figures["size_bytes"] == 64 << 20


def test_stale_nccl_segments_are_counted_and_named(tmp_path):
    options = _root(tmp_path, "tmpfs /dev/shm tmpfs rw,nosuid,nodev,size=16g 0 0\n")
    write(tmp_path / "dev/shm/nccl-k2QzP1", "x" * 4096)
    write(tmp_path / "dev/shm/nccl-Ab12Cd", "x" * 1024)
    write(tmp_path / "dev/shm/torch_123_456", "x" * 10)
    result = shm.probe(options)
    assert result.status is Status.RULED_OUT and "16.0 GiB" in result.summary
    assert result.figures["nccl_segments"] == 2 and result.figures["nccl_segment_bytes"] == 5120
    assert any("rm -f /dev/shm/nccl-*" in line for line in result.evidence)


def test_no_shm_mount_is_inconclusive(tmp_path):
    result = shm.probe(_root(tmp_path, ""))
    assert result.status is Status.INCONCLUSIVE and "no /dev/shm mount" in result.summary


@pytest.mark.parametrize("text, size", [("65536k", 64 << 20), ("16g", 16 << 30), ("1073741824", 1 << 30),
                                        ("50%", None), ("", None)])
def test_tmpfs_size_option(text, size):
    assert shm.parse_size(text) == size


def test_this_machine(tmp_path):
    """Real /proc/mounts and /dev/shm: whatever the size, the probe answers with a figure, not an error."""
    result = runner.run_probe(registry.get("shm"), {})
    assert result.status in (Status.CONFIRMED, Status.RULED_OUT, Status.INCONCLUSIVE), result
    if result.status is not Status.INCONCLUSIVE:
        assert result.figures["size_bytes"] and result.figures["free_bytes"] is not None
