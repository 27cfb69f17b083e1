"""A shell whose environment names a job (RANK, WORLD_SIZE) while the other ranks never start (QA23 B1): --timeout
bounds the wait for their reports, rank 0 says up front what it waits for, names the missing ranks, and c10d's own
store warnings stay out of the report."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from gpudoctor.probes import hostinfo, session


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_report_wait_follows_the_timeout_within_bounds():
    assert session.report_wait(None) == session.REPORT_TIMEOUT_S
    assert session.report_wait(2) == session.MIN_REPORT_WAIT_S
    assert session.report_wait(20) == 20
    assert session.report_wait(600) == session.REPORT_TIMEOUT_S


def test_the_notice_names_the_ranks_rank_0_waits_for():
    env = {"RANK": "0", "WORLD_SIZE": "4", "MASTER_ADDR": "localhost", "MASTER_PORT": "29500"}
    notice = session.job_notice(hostinfo.job_from_env(env), 10)
    assert "WORLD_SIZE=4" in notice and "ranks 1-3" in notice and "10 s" in notice
    assert session.job_notice(hostinfo.job_from_env(dict(env, RANK="2")), 10) is None
    assert session.job_notice(None, 10) is None


@pytest.mark.parametrize("command", [["probe", "port", "shm"], ["check", "--skip", "collectives", "--skip", "env",
                                                                 "--skip", "desync"]])
def test_a_missing_rank_is_named_within_the_timeout(tmp_path, command):
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(_free_port()), NO_COLOR="1")
    env.pop("TORCH_CPP_LOG_LEVEL", None)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "gpudoctor", *command, "--timeout", "3"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    took = time.monotonic() - start
    assert took < 40, took  # it waited 60 s for the reports whatever --timeout said
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ranks [1] sent no report" in done.stdout
    assert "WORLD_SIZE=2 in the environment" in done.stderr and "rank 1 must run them too" in done.stderr
    assert "[c10d]" not in done.stdout + done.stderr and "Traceback" not in done.stderr


def test_a_rank_that_cannot_reach_rank_0_speaks_for_itself(tmp_path):
    """QA23 B4: a non-zero rank whose MASTER_ADDR does not resolve printed nothing, exited 0 after 102 s and left
    52 lines of C++ traces; it now prints its own rows, says why, and fails."""
    env = dict(os.environ, RANK="1", LOCAL_RANK="1", WORLD_SIZE="2", MASTER_ADDR="no-such-host.invalid",
               MASTER_PORT=str(_free_port()), NO_COLOR="1")
    env.pop("TORCH_CPP_LOG_LEVEL", None)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "gpudoctor", "probe", "env", "--timeout", "3"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert time.monotonic() - start < 40
    assert done.returncode == 1, done.stdout + done.stderr
    assert "rank 1 cannot reach no-such-host.invalid" in done.stdout and "confirms D2" in done.stdout
    assert "[c10d]" not in done.stderr and "frame #" not in done.stderr, done.stderr
