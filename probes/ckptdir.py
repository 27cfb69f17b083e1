"""Checkpoint storage (MN7): is the checkpoint directory on a filesystem every node of a multi-node job shares?"""
from __future__ import annotations

import os
from typing import Mapping

from gpudoctor.probes import hostinfo
from gpudoctor.probes.base import Result, confirmed, inconclusive, ruled_out

# filesystems that several machines mount as one (network, parallel and object-store filesystems)
SHARED = {"nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "smbfs", "beegfs", "ceph", "cephfs", "glusterfs",
          "fuse.glusterfs", "fuse.gcsfuse", "fuse.s3fs", "fuse.mountpoint-s3", "fuse.juicefs", "fuse.sshfs",
          "fuse.goofys", "fuse.rclone", "wekafs", "panfs", "fuse.ceph-fuse", "fuse.blobfuse", "fuse.blobfuse2",
          "virtiofs", "9p", "orangefs", "quobyte", "fuse.weka", "fuse.lustre", "fuse.alluxio"}
# filesystems that live on one machine only
LOCAL = {"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "overlay", "tmpfs", "f2fs", "vfat", "ntfs", "ntfs3",
         "rootfs", "devtmpfs", "squashfs", "aufs", "jfs", "reiserfs", "bcachefs"}
ENV_DIRS = ("OUTPUT_DIR", "CHECKPOINT_DIR", "CKPT_DIR", "SAVE_DIR")


def probe(options: Mapping) -> Result:
    env = hostinfo.environ(options)
    path = options.get("checkpoint_dir") or next((env[k] for k in ENV_DIRS if env.get(k)), None) or os.getcwd()
    path = os.path.abspath(path)
    mount = mount_of(hostinfo.mounts(options), path)
    job = hostinfo.job_from_env(env)
    multi = bool(options.get("multinode") or (job and job.multi_node))
    figures = {"path": path, "multinode": multi}
    if mount is None:
        return inconclusive(f"no mount in /proc/mounts holds {path}", figures=figures, entries=("MN7",))
    point, fstype = mount
    figures.update({"mount": point, "fstype": fstype})
    evidence = [f"{path} is on {point} ({fstype})", "a multi-node job" if multi else
                "a single-node job (pass --multinode to judge a job that spans nodes)"]
    if fstype in SHARED:
        return ruled_out(f"{fstype}, shared between nodes", evidence, figures, ("MN7",))
    if fstype not in LOCAL:
        return inconclusive(f"{fstype}: check every node mounts it at the same path", evidence, figures, ("MN7",))
    if not multi:
        evidence.append("on several nodes each would keep its own partial checkpoint here")
        return ruled_out(f"local {fstype}: fine on one node", evidence, figures, ("MN7",))
    evidence.append("each node writes its own partial checkpoint here: save to storage every node mounts, or set "
                    "save_on_each_node=True")
    return confirmed(f"local {fstype}, not shared between the nodes", evidence, figures, ("MN7",))


def mount_of(mounts, path: str) -> tuple[str, str] | None:
    """(mount point, filesystem type) of the longest mount point, of hostinfo.mounts(), that holds path."""
    best = None
    for point, fstype, _opts in mounts:
        inside = path == point or path.startswith(point.rstrip("/") + "/") or point == "/"
        if inside and (best is None or len(point) > len(best[0])):
            best = (point, fstype)
    return best
