"""What a fix's write keeps (QA23 A6, A7): a hard link stays one file, the owner stays the owner, a new env file
gets the umask's mode, and an env file keeps its own form (bare NAME=value lines, CRLF)."""
from __future__ import annotations

import os
import stat

import pytest

from gpudoctor.engine.fixes.apply import write_atomic
from gpudoctor.engine.fixes.env import env_file_edit


def test_a_hard_linked_file_is_rewritten_in_place(tmp_path):
    path, twin = tmp_path / "train.py", tmp_path / "train_link.py"
    path.write_text("old\n")
    os.link(path, twin)
    write_atomic(str(path), b"new\n", None)
    assert twin.read_text() == "new\n" and os.stat(path).st_ino == os.stat(twin).st_ino


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a file to another user")
def test_the_owner_is_kept_when_root_writes(tmp_path):
    path = tmp_path / "own.py"
    path.write_text("old\n")
    os.chown(path, 65534, 65534)
    write_atomic(str(path), b"new\n", stat.S_IMODE(os.stat(path).st_mode))
    assert (os.stat(path).st_uid, os.stat(path).st_gid) == (65534, 65534) and path.read_text() == "new\n"


def test_a_new_file_gets_the_umask_s_mode(tmp_path):
    old = os.umask(0o022)
    try:
        write_atomic(str(tmp_path / "nccl.env"), b"export NCCL_DEBUG=INFO\n", None)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "nccl.env").st_mode) == 0o644


def test_a_bare_crlf_env_file_keeps_its_form():
    before = 'NCCL_DEBUG=WARN\r\nNCCL_SOCKET_IFNAME="eth0"\r\n'
    edit = env_file_edit("docker.env", before, (("NCCL_SOCKET_IFNAME", "ens5"), ("NCCL_IB_DISABLE", "1")))
    assert edit.after == "NCCL_DEBUG=WARN\r\nNCCL_SOCKET_IFNAME=ens5\r\nNCCL_IB_DISABLE=1\r\n"


def test_a_shell_env_file_keeps_export_and_quotes():
    edit = env_file_edit("nccl.sh", "export NCCL_DEBUG=WARN\n", (("NCCL_SOCKET_IFNAME", "eth0 ens5"),))
    assert edit.after == "export NCCL_DEBUG=WARN\nexport NCCL_SOCKET_IFNAME='eth0 ens5'\n"
