"""`gpudoctor fix` and `diagnose --script` through main(argv): dry run, apply, undo, JSON, colour, errors, exit codes."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent.parent / "data"
D22 = DATA / "fixes" / "D22" / "no_set_epoch.py"


@pytest.fixture(autouse=True)
def _state(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    shutil.copyfile(D22, path)
    return path


def test_dry_run_prints_the_diff_and_writes_nothing(cli, script):
    res = cli("fix", "D22", "--script", str(script))
    assert res.code == 0, res
    assert "+        sampler.set_epoch(epoch)" in res.out
    assert "[safe] sampler-set-epoch" in res.out and "dry run: nothing written" in res.out
    assert "\x1b[" not in res.out  # NO_COLOR
    assert script.read_bytes() == D22.read_bytes()
    assert max(len(line) for line in res.out.splitlines() if not line.startswith(("+", "-", " "))) <= 80


def test_apply_then_apply_again_then_undo(cli, script):
    res = cli("fix", "d22", "--script", str(script), "--apply")
    assert res.code == 0 and "wrote" in res.out and "gpudoctor fix --undo" in res.out
    assert script.read_text() == Path(str(D22) + ".fixed").read_text()
    again = cli("fix", "D22", "--script", str(script), "--apply")
    assert again.code == 1 and "already calls set_epoch" in " ".join(again.out.split())
    undo = cli("fix", "--undo")
    assert undo.code == 0 and str(script) in undo.out
    assert script.read_bytes() == D22.read_bytes()
    nothing = cli("fix", "--undo")  # QA23 L1: nothing to undo is exit 1, as the exit-code table says, not usage
    assert nothing.code == 1 and "nothing to undo" in nothing.err
    empty = cli("fix", "--undo", "--json")
    assert empty.code == 1 and json.loads(empty.out)["restored"] == []


def test_unsafe_needs_the_flag(cli, tmp_path):
    path = tmp_path / "t.py"
    shutil.copyfile(DATA / "fixes" / "D8" / "aux_head_unused.py", path)
    res = cli("fix", "D8", "--script", str(path), "--apply")
    assert res.code == 0 and "not applied find-unused-parameters: unsafe" in res.out
    assert "can hide a real bug" in res.out
    assert "find_unused_parameters" not in path.read_text()
    res = cli("fix", "D8", "--script", str(path), "--apply", "--unsafe")
    assert "find_unused_parameters=True" in path.read_text()


def test_json_output(cli, script):
    res = cli("fix", "D22", "--script", str(script), "--json")
    data = json.loads(res.out)
    assert data["schema"] == "gpudoctor.fixplan/1" and data["entry"] == "D22"
    [fix] = data["fixes"]
    assert fix["safety"] == "safe" and "+        sampler.set_epoch(epoch)" in fix["edits"][0]["diff"]


def test_colour_when_forced(cli, script):
    res = cli("fix", "D22", "--script", str(script), "--color")
    assert "\x1b[32m+        sampler.set_epoch(epoch)" in res.out


@pytest.mark.parametrize("args, message", [
    (["D22", "--script", "missing.py"], "--script missing.py: no such file"),
    (["D22", "--script", "__NOTPY__"], "not Python (line 1"),
    (["D99", "--script", "x.py"], "unknown entry 'D99'"),
    (["--apply"], "give an entry id"),
    (["D22", "--unsafe"], "--unsafe only makes sense with --apply"),
    (["D2", "--param", "nope=1"], "--param nope: unknown"),
    (["D1", "--cmd", "python train.py 'x"], "--cmd: cannot parse"),
])
def test_input_errors_are_one_line_with_exit_2(cli, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notpy.py").write_text("model = DDP(model\n")
    args = [str(tmp_path / "notpy.py") if a == "__NOTPY__" else a for a in args]
    res = cli("fix", *args)
    assert res.code == 2, res
    assert message in res.err and "Traceback" not in res.err
    assert len(res.err.strip().splitlines()) == 1


def test_stale_file_between_plan_and_apply_is_refused_with_exit_2(cli, script, monkeypatch):
    from gpudoctor.engine.fixes import apply as apply_mod

    real = apply_mod.apply_plan

    def edit_then_apply(plan, **kw):  # the user saves the file while the preview is on screen
        script.write_text(script.read_text() + "# edited\n")
        return real(plan, **kw)

    monkeypatch.setattr(apply_mod, "apply_plan", edit_then_apply)
    res = cli("fix", "D22", "--script", str(script), "--apply")
    assert res.code == 2 and "changed since the preview" in res.err
    assert script.read_text().endswith("# edited\n")


def test_nothing_to_fix_is_exit_1(cli):
    res = cli("fix", "D7")  # advice only: which launcher and parallelism fit is the user's choice
    assert res.code == 1 and "no executable fix" in res.out


def test_env_fix_with_param_and_env_file(cli, tmp_path):
    env = tmp_path / "job.env"
    res = cli("fix", "MN2", "--param", "interface=ens5", "--env-file", str(env), "--apply")
    assert res.code == 0, res
    assert "export NCCL_SOCKET_IFNAME=ens5" in res.out
    assert env.read_text() == "export NCCL_SOCKET_IFNAME=ens5\n"


def test_fix_from_a_log_takes_the_top_finding_and_its_facts(cli):
    log = DATA / "logs" / "D4" / "two-torchrun-same-master-port.log"
    res = cli("fix", "--log", str(log), "--json")
    data = json.loads(res.out)
    assert data["entry"] == "D4"
    assert data["facts"]["cmd"].startswith("torchrun ")
    [cmd] = data["fixes"][0]["commands"]
    assert "--rdzv-endpoint=localhost:0" in cmd and "--master-port" not in cmd


def test_fix_from_a_log_reads_a_command_wrapped_with_backslashes(cli):
    """Swin Transformer #158: the echoed launch spans three lines; D3's rewrite drops the literal --local_rank 0."""
    log = DATA / "logs" / "D3" / "Swin-Transformer-158-use-env-local-rank-0-stuck.log"
    res = cli("fix", "--log", str(log), "--json")
    assert res.code == 0, res
    data = json.loads(res.out)
    assert data["entry"] == "D3"
    [cmd] = [c for f in data["fixes"] for c in f["commands"]]
    assert "--use_env" in cmd and "main.py --data-path" in cmd and "--local_rank" not in cmd


def test_a_log_command_that_cannot_be_parsed_is_a_note_not_an_error(cli, tmp_path):
    log = tmp_path / "bad.log"
    log.write_text('$ torchrun --nproc-per-node=8 train.py --name "oops\n'
                   "[rank0]: RuntimeError: CUDA error: invalid device ordinal\n"
                   "[rank1]: RuntimeError: CUDA error: invalid device ordinal\n")
    res = cli("fix", "--log", str(log))
    assert res.code == 1, res  # nothing to fix, not a usage error
    assert "launch command in the log could not be read" in res.out and "No closing quotation" in res.out
    # a command the user typed is still refused outright
    assert cli("fix", "D27", "--cmd", 'torchrun train.py --name "oops').code == 2
    # a rewrite that does not apply to the log's command says why, in its own words
    log.write_text("$ python train.py --lr 1\n" + log.read_text().split("\n", 1)[1])
    res = cli("fix", "D27", "--log", str(log))
    assert "nproc-to-gpus: python starts one process" in res.out and "could not be read" not in res.out, res


def test_diagnose_ends_with_the_fix_against_the_script(cli, tmp_path):
    log = DATA / "logs" / "D4" / "two-torchrun-same-master-port.log"
    res = cli("diagnose", str(log), "--cmd", "torchrun --nproc-per-node=2 --master-port=29731 train.py --lr 3e-4")
    assert res.code == 0, res
    tail = res.out[res.out.index("Fix for D4"):]
    assert "torchrun --rdzv-backend=c10d --rdzv-endpoint=localhost:0 --nnodes=1 --nproc-per-node=2 train.py --lr 3e-4" in tail
    res = cli("diagnose", str(log), "--cmd", "python train.py", "--json")
    assert json.loads(res.out)["fix"]["entry"] == "D4"


def test_interface_from_the_nic_probe_figures():
    from gpudoctor.engine.fixes.facts import interface_from_nic

    figures = {"selected": ["docker0"], "interfaces": {
        "lo": {"state": "unknown", "speed_mbps": None}, "docker0": {"state": "up", "speed_mbps": 10000},
        "eno1": {"state": "up", "speed_mbps": 1000}, "ens5": {"state": "up", "speed_mbps": 100000},
        "ib0": {"state": "down", "speed_mbps": 200000}}}
    assert interface_from_nic(figures) == "ens5"
    assert interface_from_nic({"interfaces": {"lo": {"state": "unknown"}}}) is None


def test_fix_with_the_live_nic_probe(cli):
    res = cli("fix", "MN2", "--probe", "--json")
    assert res.code == 0, res
    [fix] = json.loads(res.out)["fixes"]
    assert fix["env"][0]["name"] == "NCCL_SOCKET_IFNAME" and fix["env"][0]["value"]


def test_facts_from_a_multi_rank_log_directory():
    from gpudoctor.engine.diagnose import diagnose
    from gpudoctor.engine.fixes import facts_from_diagnosis
    from gpudoctor.engine.sources import resolve
    from gpudoctor.kb.catalog import load_catalog

    logs = str(DATA.parent.parent / "examples" / "rank-crash-then-timeout")
    facts = facts_from_diagnosis(diagnose(load_catalog(use_cache=False), resolve([logs])), logs=[logs])
    assert facts.get("world_size") == 4, facts


def test_mn7_save_on_each_node_applied_once_and_undone(cli, tmp_path):
    source = Path(__file__).resolve().parent.parent / "data" / "fixes" / "MN7" / "trainer_two_nodes.py"
    script = tmp_path / "train.py"
    script.write_bytes(source.read_bytes())
    res = cli("fix", "MN7", "--script", str(script), "--apply")
    assert res.code == 0, res
    fixed = script.read_text()
    assert fixed.count("save_on_each_node=True") == 1 and "load_best_model_at_end=True," in fixed
    compile(fixed, str(script), "exec")
    again = cli("fix", "MN7", "--script", str(script), "--apply")
    assert again.code == 1 and "without save_on_each_node" in " ".join(again.out.split())
    assert cli("fix", "--undo").code == 0 and script.read_bytes() == source.read_bytes()


def test_a_script_too_deeply_nested_to_rewrite_is_exit_2_naming_it(cli, script):
    text = script.read_text() + "y = 1" + " + 1" * 400 + "\n"
    script.write_text(text)
    res = cli("fix", "D22", "--script", str(script))
    assert res.code == 2, res
    assert "nested too deeply" in res.err and str(script) in res.err and "internal error" not in res.err
    assert script.read_text() == text


def test_a_fix_that_cannot_be_undone_is_forgotten_so_the_one_before_it_can_be(cli, tmp_path):
    keep, gone = tmp_path / "keep.py", tmp_path / "gone.py"
    for path in (keep, gone):
        shutil.copyfile(D22, path)
        assert cli("fix", "D22", "--script", str(path), "--apply").code == 0
    gone.unlink()
    res = cli("fix", "--undo")
    assert res.code == 2 and "gone.py: no longer exists" in res.err and "gpudoctor fix --forget" in res.err
    assert cli("fix", "--forget").code == 0
    assert cli("fix", "--undo").code == 0 and keep.read_bytes() == D22.read_bytes() and not gone.exists()
    assert cli("fix", "--forget").code == 1  # nothing applied is left: nothing to do, not a usage error


def test_a_piped_log_is_read_as_a_file_is(tmp_path):
    """QA23 A16: `fix --log -` read nothing and said the log matched nothing known."""
    import subprocess
    import sys

    log = ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
           "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use\n")
    done = subprocess.run([sys.executable, "-m", "gpudoctor", "fix", "--log", "-"], input=log, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # D4's fixes need --cmd or --script: shown, nothing to write
    assert "Fix for D4" in done.stdout and "nothing known matched" not in done.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("param", ["timeout_minutes=abc", "timeout_minutes=2.5", "timeout_minutes=-5",
                                   "timeout_minutes=0", "zero_stage=abc", "zero_stage=7", "nproc=abc", "nproc=-1",
                                   "nnodes=abc", "rdzv_port=abc", "port=99999",
                                   # code written into the script: one expression, never a statement or a new line
                                   "sample_input=x; import os", "sample_input=torch.zeros(1,\n2)",
                                   "sample_input=torch.zeros(1,", "sample_input="])
def test_a_param_value_that_would_be_written_unchecked_is_a_usage_error(cli, param):
    """QA23 A17: some crashed with exit 3, others went into the script or the command as they were."""
    res = cli("fix", "MN3", "--param", param)
    assert res.code == 2 and f"--param {param.split('=')[0]}" in res.err and "internal error" not in res.err


@pytest.mark.parametrize("param", ["nproc=gpu", "nnodes=1:4", "timeout_minutes=30", "zero_stage=3",
                                   "sample_input=torch.zeros(1, 32, device=device)"])
def test_good_param_values_pass(cli, param):
    assert cli("fix", "MN3", "--param", param).code in (0, 1)


def test_a_script_over_the_size_limit_is_refused_at_once(cli, tmp_path):
    """QA23 L3: a 3.5 MB file took 36 s and 1.6 GB to be told there was nothing to fix."""
    import time

    from gpudoctor.engine.fixes.plan import MAX_SCRIPT_BYTES

    big = tmp_path / "big.py"
    big.write_text("x = 1\n" * (MAX_SCRIPT_BYTES // 6 + 10))
    start = time.monotonic()
    res = cli("fix", "D22", "--script", str(big))
    assert res.code == 2 and "MB is more than a training script" in res.err and time.monotonic() - start < 5


def test_fix_from_a_run_folder_reads_its_logs_and_names_the_script_it_left_out(cli, tmp_path):
    """QA25 Q12: a train.py beside the logs made `fix --log DIR` a usage error (exit 2)."""
    import shutil

    shutil.copy(DATA / "logs" / "D4" / "two-torchrun-same-master-port.log", tmp_path / "rank0.log")
    (tmp_path / "train.py").write_text("import torch\n")
    res = cli("fix", "--log", str(tmp_path), "--json")
    assert res.code == 0, res
    assert json.loads(res.out)["entry"] == "D4"
    assert "left out 1 file" in res.err and "train.py" in res.err


DS_BATCH_LOG = (
    "Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/config.py", line 927, in _batch_assertion\n'
    "    assert train_batch == micro_batch * grad_acc * self.world_size, (\n"
    "AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
    "gradient_acc_step * world_size 256 != 8 * 4 * 4\n")


def test_dropping_train_batch_size_is_unsafe_and_says_the_global_batch_it_leaves(cli, tmp_path):
    """QA25 Q20: the drop was labelled safe and written by --apply alone, though it halved the configured global
    batch (256 -> 128); the world size was also read as 256 (the train batch) from the assertion's numbers. The safe
    fix now keeps the global batch by the accumulation steps."""
    log = tmp_path / "ds.log"
    log.write_text(DS_BATCH_LOG)
    config = tmp_path / "ds_config.json"
    original = ('{\n  "train_batch_size": 256,\n  "train_micro_batch_size_per_gpu": 8,\n'
                '  "gradient_accumulation_steps": 4\n}\n')
    config.write_text(original)
    res = cli("fix", "--log", str(log), "--config", str(config), "--json", "--only", "drop-global-batch")
    [drop] = json.loads(res.out)["fixes"]
    assert drop["safety"] == "unsafe"
    notes = " ".join(drop["notes"])
    assert "8 x 4 x 4 = 128 (the config asked for 256)" in notes
    assert "set gradient_accumulation_steps to 8" in notes
    plan = json.loads(cli("fix", "--log", str(log), "--config", str(config), "--json").out)
    [keep] = [f for f in plan["fixes"] if f["action"] == "keep-global-batch"]
    assert keep["safety"] == "safe" and "the global batch stays 256: 8 x 8 x 4" in " ".join(keep["notes"])
    res = cli("fix", "--log", str(log), "--config", str(config), "--apply")
    assert res.code == 0, res
    written = json.loads(config.read_text())  # --apply alone writes the safe fix: the global batch kept
    assert written["train_batch_size"] == 256 and written["gradient_accumulation_steps"] == 8
