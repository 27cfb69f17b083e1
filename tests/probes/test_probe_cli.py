"""`gpudoctor probe` and `gpudoctor check` through main(argv) and as subprocesses: rows, exit codes, no torch."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from gpudoctor.probes import registry

BLOCK_TORCH = textwrap.dedent("""
    import sys
    class _NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError("No module named 'torch'")
            return None
    sys.meta_path.insert(0, _NoTorch())
""")


@pytest.fixture(scope="module")
def check_json():
    """One full `gpudoctor check --json` run, shared by the assertions below (it takes seconds)."""
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "check", "--json"], capture_output=True, text=True,
                          timeout=120)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_check_runs_every_probe_and_the_checklist(check_json):
    code, data, err = check_json
    assert code in (0, 1), err
    assert [r["probe"] for r in data["results"]] == registry.ids()
    assert not [r for r in data["results"] if r["status"] == "errored"], data["results"]
    by_id = {r["probe"]: r for r in data["results"]}
    assert by_id["collectives"]["status"] == "ruled_out" and "on 2 gloo ranks" in by_id["collectives"]["summary"]
    assert [s["entries"] for s in data["checklist"]][:3] == [["MN1"], ["MN2", "MN3"], ["MN4"]]
    assert data["seconds"] < 30
    assert code == (1 if any(r["status"] == "confirmed" for r in data["results"]) else 0)


def test_check_rows_fit_80_columns(cli):
    res = cli("check", "--skip", "collectives", "--skip", "desync", "--skip", "versions")
    assert res.code in (0, 1), res
    lines = res.out.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    rows = [line for line in lines if line.split(" ")[0] in ("pass", "fail", "warn", "skip", "error")]
    assert len(rows) == len(registry.PROBES) - 3 + 6  # six checklist steps (MN7's shared checkpoint storage last)


def test_check_without_torch_skips_what_needs_it(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(BLOCK_TORCH)
    # keep a PYTHONPATH the package may be installed on (a --target install), after the torch blocker
    path = os.pathsep.join(filter(None, (str(tmp_path), os.environ.get("PYTHONPATH"))))
    env = {"PYTHONPATH": path, "NO_COLOR": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "check", "--json"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    by_id = {r["probe"]: r for r in json.loads(proc.stdout)["results"]}
    for probe in ("collectives", "desync", "versions"):
        assert by_id[probe]["status"] == "skipped"
        assert "torch is not installed" in by_id[probe]["summary"]
    assert by_id["port"]["status"] == "ruled_out"


def test_probe_rows_and_evidence_fit_80_columns(cli):
    res = cli("probe", "nic", "timeouts", "mtu", "port")
    assert res.code in (0, 1), res
    assert all(len(line) <= 80 for line in res.out.splitlines())
    assert res.out.splitlines()[0].split()[1] == "nic"


def test_usage_errors(cli):
    res = cli("probe", "nope")
    assert res.code == 2 and "known probes: env, port" in res.err
    res = cli("probe")
    assert res.code == 2
    res = cli("probe", "--for", "D4", "--max-size", "lots")
    assert res.code == 2 and "--max-size" in res.err
    res = cli("check", "--skip", "nope")
    assert res.code == 2


@pytest.mark.parametrize("argv, words", [
    (("check", "--timeout", "-5"), "--timeout must be a number of seconds above 0"),
    (("probe", "port", "--timeout", "0"), "--timeout must be a number of seconds above 0"),
    (("probe", "timeouts", "--pg-timeout", "nan"), "--pg-timeout must be"),
    (("probe", "port", "--port", "70000"), "--port must be between 1 and 65535"),
    (("probe", "launchers", "--grad-accum", "0"), "--grad-accum must be at least 1"),
])
def test_out_of_range_numbers_are_usage_errors_before_any_probe_runs(cli, argv, words):
    res = cli(*argv)
    assert res.code == 2 and words in res.err and res.out == ""


def test_list(cli):
    res = cli("probe", "--list")
    assert res.code == 0 and len(res.out.splitlines()) == len(registry.PROBES)


@pytest.mark.parametrize("module", ["gpudoctor.probes", "gpudoctor.probes.runner", "gpudoctor.probes.registry",
                                    "gpudoctor.probes.session", "gpudoctor.commands.probe",
                                    "gpudoctor.commands.check", "gpudoctor.probes.collectives",
                                    "gpudoctor.probes.desync", "gpudoctor.probes.versions"])
def test_importing_probe_modules_leaves_torch_unloaded(module):
    code = f"import sys, {module}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_env_probe_under_slurm_as_srun_and_sbatch_would_start_it(tmp_path):
    """Real subprocesses with the variables srun sets in a task, and sbatch in the batch script of a 2-node job."""
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "WORLD_SIZE", "LOCAL_",
                                                                      "MASTER_", "TORCHELASTIC_"))}
    job = {"SLURM_JOB_ID": "77", "SLURM_NNODES": "2", "SLURM_JOB_NUM_NODES": "2", "COLUMNS": "80", "NO_COLOR": "1"}
    task = dict(job, SLURM_STEP_ID="0", SLURM_PROCID="3", SLURM_LOCALID="3", SLURM_NTASKS="16", SLURM_NODEID="0",
                SLURM_STEP_NUM_TASKS="16", SLURM_STEP_NUM_NODES="2", SLURM_STEP_TASKS_PER_NODE="8(x2)")

    def probe(env):
        proc = subprocess.run([sys.executable, "-m", "gpudoctor", "probe", "env", "--json"], capture_output=True,
                              text=True, timeout=60, env={**base, **env})
        return proc.returncode, json.loads(proc.stdout)["results"][0]

    code, result = probe(task)
    assert (code, result["status"], result["entries"]) == (0, "inconclusive", ["D1"])
    assert any("SLURM_PROCID" in e for e in result["evidence"])  # the whole advice, not only the cut summary
    code, result = probe(dict(job, TORCHELASTIC_RUN_ID="x"))  # torchrun started by the batch script itself
    assert (code, result["status"], result["entries"]) == (1, "confirmed", ["D2"])
    import socket

    with socket.socket() as s:  # a launched probe run meets its peers here: a world of one meets only itself
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, result = probe(dict(task, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                              MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))  # exported once for every task
    assert (code, result["status"]) == (1, "confirmed") and "WORLD_SIZE=1 but srun started 16" in result["summary"]
    assert {"D1", "D3"} <= set(result["entries"]) and any("RANK=0 but this is task 3" in e for e in result["evidence"])


def test_a_rank_whose_master_port_is_held_by_a_program_that_never_answers_ends_and_says_so():
    """QA25b B4: the report exchange's TCPStore handshake waited forever, in C++, on a port held by a program that
    accepts and never answers: Ctrl-C and SIGTERM did nothing. It now ends at its timeout and names the cause."""
    import socket
    import time

    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen(16)  # accepts, never answers
    port = holder.getsockname()[1]
    env = {**os.environ, "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "gpudoctor", "probe", "port", "--timeout", "5", "--json"],
                              capture_output=True, text=True, timeout=90, env=env)
    finally:
        holder.close()
    assert time.monotonic() - start < 60
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    [report] = [r for r in doc["results"] if r["probe"] == "report"]
    assert "accepts but never answers" in report["summary"] and report["entries"] == ["D4"]


def test_an_impossible_rank_is_reported_at_once_not_after_a_rendezvous_wait():
    """QA25b B2: RANK=3 of WORLD_SIZE=2 waited ~110 s for a store and then blamed the rendezvous (D2)."""
    import time

    env = {**os.environ, "RANK": "3", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29512"}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "probe", "env", "--json"], capture_output=True,
                          text=True, timeout=60, env=env)
    assert time.monotonic() - start < 20
    doc = json.loads(proc.stdout)
    [result] = doc["results"]
    assert proc.returncode == 1 and result["entries"] == ["D1"] and "RANK=3 is outside 0..1" in result["summary"]
