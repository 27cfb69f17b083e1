"""`gpudoctor stacks`: a real hung gloo job under torchrun, its ranks found, dumped with py-spy and diagnosed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.main import main
from gpudoctor.probes import stackdump

ROOT = Path(__file__).resolve().parents[2]
needs_pyspy = pytest.mark.skipif(stackdump.py_spy() is None, reason="py-spy is not installed")

@pytest.fixture
def hung_job(tmp_path):
    from hungjob import hung_job as start

    with start(tmp_path) as proc:
        yield proc


def run_cli(argv, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    env.update(NO_COLOR="1", COLUMNS="80")
    return subprocess.run([sys.executable, "-m", "gpudoctor", *argv], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


@needs_pyspy
def test_a_hung_job_s_ranks_are_found_dumped_and_named_d21(hung_job, tmp_path):
    found = stackdump.find_training_processes()
    ours = [p for p in found if str(tmp_path) in p.command]
    assert [(p.rank, p.local_rank) for p in ours] == [(0, 0), (1, 1)]  # the torchrun agent has no rank: left out
    done = run_cli(["stacks", "--out", str(tmp_path / "dumps"), "--json", "--pid", str(ours[0].pid),
                    "--pid", str(ours[1].pid)], tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    top = report["findings"][0]
    assert (top["id"], top["tier"]) == ("D21", "match")
    assert any("save_checkpoint" in ev["text"] for ev in top["evidence"])
    assert sorted(p.name for p in (tmp_path / "dumps").iterdir()) == ["rank0.py-spy.txt", "rank1.py-spy.txt"]
    assert "save_checkpoint" in (tmp_path / "dumps" / "rank0.py-spy.txt").read_text()
    assert "2 stack(s) saved in" in done.stderr
    stacks = report["stacks"]
    assert stacks["folder"] == str(tmp_path / "dumps") and stacks["failed"] == []
    assert [(d["pid"], d["rank"], d["local_rank"], Path(d["file"]).name) for d in stacks["dumped"]] == [
        (ours[0].pid, 0, 0, "rank0.py-spy.txt"), (ours[1].pid, 1, 1, "rank1.py-spy.txt")]


@needs_pyspy
def test_without_pids_it_finds_the_ranks_itself(hung_job, tmp_path):
    done = run_cli(["stacks", "--out", "dumps"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "D21" in done.stdout and "save_checkpoint" in done.stdout
    assert (tmp_path / "dumps" / "rank0.py-spy.txt").is_file()


@needs_pyspy
def test_ranks_waiting_in_different_collectives_are_d19(tmp_path):
    from hungjob import hung_job

    with hung_job(tmp_path, "desync"):
        done = run_cli(["stacks", "--out", "dumps", "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    top = json.loads(done.stdout)["findings"][0]
    assert (top["id"], top["tier"]) == ("D19", "match")
    assert sorted(ev["text"].split(":")[0] for ev in top["evidence"]) == ["rank 0 stopped in all_reduce",
                                                                          "rank 1 stopped in broadcast"]


@needs_pyspy
def test_a_process_that_waits_on_nothing_known_is_exit_1_without_word_guesses(tmp_path):
    ready = tmp_path / "ready"
    sleeper = subprocess.Popen([sys.executable, "-c", f"import time; open({str(ready)!r}, 'w').close(); "
                                "time.sleep(120)"])
    try:
        while not ready.exists():
            assert sleeper.poll() is None
        done = run_cli(["stacks", "--pid", str(sleeper.pid), "--out", "d", "--json"], tmp_path)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["findings"] == []  # a stack's words ("Process", "Thread") are no evidence
    assert (tmp_path / "d" / f"pid{sleeper.pid}.py-spy.txt").read_text().startswith(f"Process {sleeper.pid}: ")


def write_process(proc: Path, pid: int, ppid: int, argv: list[str], env: dict[str, str]) -> None:
    d = proc / str(pid)
    d.mkdir(parents=True)
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (d / "environ").write_bytes(b"".join(f"{k}={v}\0".encode() for k, v in env.items()))
    (d / "stat").write_text(f"{pid} ({os.path.basename(argv[0])}) S {ppid} 1 1 0 -1\n")


def test_one_process_per_rank_from_the_environment(tmp_path):
    proc = tmp_path / "proc"
    write_process(proc, 100, 1, ["/venv/bin/python3", "/venv/bin/torchrun", "train.py"], {"PATH": "/bin"})
    write_process(proc, 101, 100, ["/venv/bin/python3", "-u", "train.py"], {"RANK": "1", "LOCAL_RANK": "1"})
    write_process(proc, 102, 100, ["/venv/bin/python3", "-u", "train.py"], {"RANK": "0", "LOCAL_RANK": "0"})
    write_process(proc, 103, 102, ["/venv/bin/python3", "-u", "train.py"], {"RANK": "0", "LOCAL_RANK": "0"})  # a loader worker
    write_process(proc, 104, 1, ["/bin/bash", "run.sh"], {"RANK": "0"})  # not Python: py-spy cannot read it
    write_process(proc, 105, 1, ["python", "hvd.py"], {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0"})
    (proc / "self").mkdir()
    found = stackdump.find_training_processes(str(proc))
    assert [(p.pid, p.rank, p.local_rank) for p in found] == [(102, 0, 0), (101, 1, 1), (105, 2, 0)]
    assert stackdump.file_name(found[0]) == "rank0.py-spy.txt"


def test_under_srun_the_torchrun_agent_is_not_a_rank_but_srun_s_own_tasks_are(tmp_path):
    proc = tmp_path / "proc"
    slurm = {"SLURM_PROCID": "0", "SLURM_LOCALID": "0"}
    write_process(proc, 200, 1, ["python3", "/venv/bin/torchrun", "--nnodes=2", "train.py"], slurm)
    write_process(proc, 201, 200, ["python3", "-u", "train.py"], dict(slurm, RANK="0", LOCAL_RANK="0"))
    write_process(proc, 202, 200, ["python3", "-u", "train.py"], dict(slurm, RANK="1", LOCAL_RANK="1"))
    assert [(p.pid, p.rank) for p in stackdump.find_training_processes(str(proc))] == [(201, 0), (202, 1)]
    other = tmp_path / "proc2"  # srun starts the ranks itself (Lightning under SLURM): SLURM_PROCID is the rank
    write_process(other, 300, 1, ["python", "train.py"], {"SLURM_PROCID": "4", "SLURM_LOCALID": "0"})
    write_process(other, 301, 1, ["python", "train.py"], {"SLURM_PROCID": "5", "SLURM_LOCALID": "1"})
    assert [(p.pid, p.rank, p.local_rank) for p in stackdump.find_training_processes(str(other))] == [
        (300, 4, 0), (301, 5, 1)]


def test_host_in_out_becomes_this_machine_s_name(tmp_path):
    import socket

    folder = stackdump.new_folder(str(tmp_path / "hang" / "{host}"))
    assert folder.name == socket.gethostname().split(".")[0] and folder.is_dir()


def test_without_proc_a_pid_is_checked_by_signal_0(tmp_path):
    no_proc = str(tmp_path / "no-proc")  # macOS has no /proc: the pid is still checked, its rank unknown
    assert [(p.pid, p.rank) for p in stackdump.processes_by_pid([os.getpid()], no_proc)] == [(os.getpid(), None)]
    with pytest.raises(ValueError, match="no process 999999999 on this machine"):
        stackdump.processes_by_pid([999999999], no_proc)
    assert stackdump.find_training_processes(no_proc) == []


def test_no_rank_here_is_exit_1_with_what_was_looked_for(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(stackdump, "find_training_processes", lambda: [])
    code = main(["stacks", "--out", str(tmp_path / "d")])
    assert code == 1
    assert "no training process on this machine" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
    assert main(["stacks", "--json"]) == 1  # QA23 L1: a script reading stdout gets JSON in this outcome too
    data = json.loads(capsys.readouterr().out)
    assert data["findings"] == [] and "no training process" in data["stacks"]["message"]


def test_without_py_spy_the_error_says_how_to_get_it(monkeypatch, capsys):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    assert main(["stacks"]) == 2
    assert "py-spy is not installed: pip install py-spy" in capsys.readouterr().err


@needs_pyspy
@pytest.mark.parametrize("argv, message", [
    (["--pid", "0"], "--pid must be a process id"),
    (["--timeout", "0"], "--timeout must be more than 0"),
    (["--pid", "999999999"], "no process 999999999 on this machine"),
])
def test_bad_arguments_are_exit_2(argv, message, capsys):
    assert main(["stacks", *argv]) == 2
    assert message in capsys.readouterr().err


@needs_pyspy
def test_an_out_folder_with_files_is_never_written_into(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["stacks", "--pid", str(os.getpid()), "--out", str(tmp_path)]) == 2
    assert "exists and is not an empty folder" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


@needs_pyspy
def test_a_process_py_spy_cannot_read_is_named_and_nothing_dumped_is_exit_2(tmp_path):
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        done = run_cli(["stacks", "--pid", str(sleeper.pid), "--out", "d"], tmp_path)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert done.returncode == 2
    assert f"(pid {sleeper.pid}):" in done.stderr and "no stack could be dumped (1 tried)" in done.stderr
    assert list((tmp_path / "d").iterdir()) == []


def test_two_jobs_on_one_node_are_named_apart_and_not_read_as_one(tmp_path, capsys, monkeypatch):
    proc = tmp_path / "proc"
    for pid, rank, port in ((401, 0, 29500), (402, 1, 29500), (411, 0, 29600), (412, 1, 29600)):
        write_process(proc, pid, 1, ["python3", "-u", "train.py"],
                      {"RANK": str(rank), "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    found = stackdump.find_training_processes(str(proc))
    assert sorted(sorted(p.pid for p in group) for group in stackdump.jobs(found).values()) == [[401, 402], [411, 412]]
    monkeypatch.setattr(stackdump, "find_training_processes", lambda: found)
    monkeypatch.setattr(stackdump, "py_spy", lambda: "/usr/bin/true")
    assert main(["stacks", "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert "2 jobs have ranks on this machine" in err and "--pid 401 --pid 402" in err and "--pid 411 --pid 412" in err
    assert not (tmp_path / "d").exists()


def test_py_spys_cause_is_kept_with_what_to_do_about_it(tmp_path):
    """QA25b B3: without ptrace permission py-spy says "Failed to get process executable name. Check that the process
    is running." and, on the lines after, "Caused by: 0: Permission denied (os error 13)"; only the first was kept."""
    fake = tmp_path / "py-spy"
    fake.write_text("#!/bin/sh\n"
                    "echo 'Error: Failed to get process executable name. Check that the process is running.' >&2\n"
                    "echo '' >&2\necho 'Caused by:' >&2\necho '    0: Permission denied (os error 13)' >&2\nexit 1\n")
    fake.chmod(0o755)
    dumped = stackdump.dump_stack(str(fake), stackdump.TrainingProcess(4242, 0, 0, "python train.py"))
    assert dumped.text is None
    assert "Failed to get process executable name: Permission denied (os error 13)" in dumped.error
    assert "--cap-add SYS_PTRACE" in dumped.error
