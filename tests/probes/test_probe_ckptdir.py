"""The checkpoint-storage probe (MN7) on fabricated /proc/mounts, through the CLI, and on this machine."""
from __future__ import annotations

import pytest
from sysfake import write

from gpudoctor.probes import ckptdir, hostinfo, registry, runner
from gpudoctor.probes.base import Status

MOUNTS = """overlay / overlay rw,relatime,lowerdir=/l,upperdir=/u 0 0
tmpfs /dev/shm tmpfs rw,size=65536k 0 0
/dev/nvme0n1p1 /scratch ext4 rw,relatime 0 0
fs1:/export/home /home nfs4 rw,vers=4.2 0 0
10.0.0.5@tcp:/lustre /lustre lustre rw 0 0
/dev/sdb1 /mnt/my\\040data xfs rw 0 0
"""
TWO_NODES = {"RANK": "3", "WORLD_SIZE": "16", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "node0",
             "MASTER_PORT": "29500"}


@pytest.fixture
def root(tmp_path):
    write(tmp_path / "proc/mounts", MOUNTS)
    return str(tmp_path)


@pytest.mark.parametrize("path, mount", [("/scratch/run1/ckpt", ("/scratch", "ext4")), ("/home/u/out", ("/home", "nfs4")),
                                         ("/mnt/my data/x", ("/mnt/my data", "xfs")), ("/opt/out", ("/", "overlay")),
                                         ("/scratchy", ("/", "overlay"))])
def test_the_longest_mount_point_holding_the_path(root, path, mount):
    assert ckptdir.mount_of(hostinfo.mounts({"sys_root": root}), path) == mount


def test_local_disk_in_a_multi_node_job_is_confirmed(root):
    result = runner.run_probe(registry.get("ckptdir"), {"sys_root": root, "checkpoint_dir": "/scratch/run1",
                                                       "env": TWO_NODES})
    assert result.status is Status.CONFIRMED and result.entries == ("MN7",)
    assert "local ext4" in result.summary and any("save_on_each_node" in e for e in result.evidence)


def test_shared_and_single_node_are_ruled_out_and_unknown_filesystems_inconclusive(root):
    nfs = ckptdir.probe({"sys_root": root, "checkpoint_dir": "/home/u/out", "multinode": True, "env": {}})
    assert nfs.status is Status.RULED_OUT and "nfs4" in nfs.summary
    one = ckptdir.probe({"sys_root": root, "checkpoint_dir": "/scratch/run1", "env": {}})
    assert one.status is Status.RULED_OUT and "fine on one node" in one.summary
    write(__import__("pathlib").Path(root) / "proc/mounts", "odd /data fuse.mystery rw 0 0\n")
    odd = ckptdir.probe({"sys_root": root, "checkpoint_dir": "/data/x", "multinode": True, "env": {}})
    assert odd.status is Status.INCONCLUSIVE


def test_the_directory_comes_from_the_environment(root):
    env = dict(TWO_NODES, OUTPUT_DIR="/lustre/proj/out")
    result = ckptdir.probe({"sys_root": root, "env": env})
    assert result.status is Status.RULED_OUT and result.figures["path"] == "/lustre/proj/out"


def test_cli_flag_and_exit_code(cli_proc, root):
    r = cli_proc("probe", "ckptdir", "--multinode", "--checkpoint-dir", "/scratch/x", "--sys-root", root)
    assert r.code == 1 and "fail" in r.out and "MN7" in r.out
