"""What the launch tells: the command a log echoes, the launcher's own frames and refusals, and how a rank was killed
(D1, D2, D3, D24, D27, D28 read from the launch rather than from the error alone)."""
from __future__ import annotations

import pytest
from rule_helpers import matches, possible, run


_SWIN = ("CUDA_VISIBLE_DEVICES=0,1,2,3 python -m torch.distributed.launch --nproc_per_node=4 --use_env  --master_port 12345 \\\n"
         "    main.py --local_rank 0 \\\n    --cfg configs/swin_tiny_patch4_window7_224.yaml\n\nINFO Start training\n")


def test_an_echoed_launch_that_hands_every_worker_local_rank_0_is_d3(catalog):
    d = run(catalog, _SWIN)
    assert matches(d)[:1] == ["D3"]
    assert any("--local_rank 0" in n for n in d.notes)


@pytest.mark.parametrize("launch", [
    "python -m torch.distributed.launch --nproc_per_node=4  --master_port 12345",  # its own --local_rank=i wins
    "python -m torch.distributed.launch --nproc_per_node=1 --use_env  --master_port 12345",  # one worker
])


def test_a_literal_local_rank_the_launcher_overrides_or_nobody_shares_is_not_d3(catalog, launch):
    d = run(catalog, _SWIN.replace(_SWIN.split(" \\")[0], "CUDA_VISIBLE_DEVICES=0,1,2,3 " + launch))
    assert "D3" not in matches(d)


def test_fewer_visible_gpus_than_processes_per_node_on_the_echoed_command_is_d27(catalog):
    """ACAR-Net #5: the script spawns its own --nproc_per_node 8 workers on the two GPUs CUDA_VISIBLE_DEVICES gives."""
    text = ("RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:32, unhandled cuda error, "
            "NCCL version 2.4.8\n\nmy script is :CUDA_VISIBLE_DEVICES='0,1' python main.py --config a.yaml  "
            "--nproc_per_node 8 --backend nccl  --master_port 31114\n")
    assert matches(run(catalog, text))[:1] == ["D27"]
    assert "D27" not in matches(run(catalog, text.replace("--nproc_per_node 8", "--nproc_per_node 2")))


_DUPLICATE = """CUDA_VISIBLE_DEVICES={visible} torchrun --master_port=7777 --nproc_per_node=4 train.py -c configs/det.yml
[rank3]: Last error:
[rank3]: Duplicate GPU detected : rank 3 and rank 0 both on CUDA device 86000
[rank1]:   File "/usr/local/lib/python3.10/dist-packages/torch/nn/parallel/distributed.py", line 825, in __init__
"""


def test_a_duplicate_gpu_under_a_launch_with_fewer_visible_gpus_than_ranks_is_d27_first(catalog):
    """DEIMv2 #81: four ranks on the one GPU CUDA_VISIBLE_DEVICES=1 leaves share it whatever index each picks, so
    the duplicate-GPU error D3 reads alone is the launch's doing."""
    assert matches(run(catalog, _DUPLICATE.format(visible="1")))[:1] == ["D27"]
    # with a GPU for every rank the duplicate is a rank that picked another's GPU: D3 as before
    assert matches(run(catalog, _DUPLICATE.format(visible="0,1,2,3")))[:1] == ["D3"]


_ONE_PROCESS = """Loading checkpoint shards:   0% 0/2 [00:00<?, ?it/s]Traceback (most recent call last):
  File "/usr/local/bin/accelerate", line 8, in <module>
    sys.exit(main())
  File "/usr/local/lib/python3.10/dist-packages/accelerate/commands/launch.py", line 1017, in launch_command
    {launcher}(args)
  File "/usr/local/lib/python3.10/dist-packages/accelerate/commands/launch.py", line 637, in {launcher}
    raise subprocess.CalledProcessError(returncode=process.returncode, cmd=cmd)
subprocess.CalledProcessError: Command '['/usr/bin/python3', '-m', 'autotrain.trainers.clm']' died with <Signals.SIGKILL: 9>.
"""


def test_the_one_process_of_accelerates_simple_launcher_killed_is_not_per_rank_copies(catalog):
    """autotrain-advanced #456: accelerate's simple_launcher starts one process; SIGKILL there is not D28."""
    d = run(catalog, _ONE_PROCESS.format(launcher="simple_launcher"))
    assert "D28" not in matches(d)
    assert any("simple_launcher" in n for n in d.notes)
    # the deepspeed launcher's child is a launcher of several ranks: the kill stays D28's sign
    assert matches(run(catalog, _ONE_PROCESS.format(launcher="deepspeed_launcher")))[:1] == ["D28"]


def test_coquis_refusal_of_several_gpus_without_its_launcher_is_d1(catalog):
    """A plain start on several visible GPUs, refused for want of the trainer's launcher: D1 by the labelling rule of
    2026-11-28, also for a user after one GPU (whose fix is CUDA_VISIBLE_DEVICES=0)."""
    d = run(catalog, "RuntimeError:  [!] 2 active GPUs. Define the target GPU by `CUDA_VISIBLE_DEVICES`. For "
                     "multi-gpu training use `TTS/bin/distribute.py`.")
    assert matches(d)[:1] == ["D1"]
    assert "D1" not in matches(run(catalog, "RuntimeError: 2 active GPUs found on this machine\n"))


def test_a_required_local_rank_the_launcher_never_passed_is_d1(catalog):
    """Swin Transformer #342: main.py requires --local_rank; torch 2.x's launch passes --local-rank."""
    line = "main.py: error: the following arguments are required: {}"
    assert matches(run(catalog, line.format("--local_rank")))[:1] == ["D1"]
    assert "D1" not in matches(run(catalog, line.format("--output_dir")))


_ELASTIC_SIGBUS = ("Bus error: nonexistent physical address\n"
                   "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -7) local_rank: 0 (pid: 53138) "
                   "of binary: /usr/bin/python\n"
                   "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n")


def test_one_rank_killed_by_sigbus_leans_d24_and_a_dataloader_bus_error_does_not(catalog):
    """torch.distributed.elastic's line for a training process killed by SIGBUS (exit code -7) is a lean to D24, not
    a match: one process faulting on mapped memory may be a truncated file; two ranks together stay a match."""
    d = run(catalog, _ELASTIC_SIGBUS)
    assert matches(d) == [] and possible(d)[:1] == ["D24"]
    assert any("SIGBUS" in ev.text for ev in d.findings[0].evidence)
    loader = _ELASTIC_SIGBUS + "RuntimeError: DataLoader worker (pid 37) is killed by signal: Bus error.\n"
    assert "D24" not in possible(run(catalog, loader))[:1]
    other = _ELASTIC_SIGBUS.replace("exitcode: -7", "exitcode: 1").replace("Bus error: nonexistent physical address",
                                                                          "ValueError: bad config")
    assert "D24" not in possible(run(catalog, other))[:1]


@pytest.mark.parametrize("line", [
    'AssertionError: dist_url=auto is not supported for multi-machine jobs.',   # nerfstudio
    'AssertionError: dist_url=auto not supported in multi-machine jobs.',        # detectron2
    'ValueError: dist_url="auto" not supported in multi-machine jobs',           # launchers that raise instead
])


def test_an_auto_init_url_refused_for_several_machines_is_d2(catalog, line):
    d = run(catalog, "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n" + line + "\n")
    assert matches(d)[:1] == ["D2"]


_ULTRA = ("Traceback (most recent call last):\n  File \"train.py\", line 4, in <module>\n"
          "ValueError: Invalid CUDA 'device={ids}' requested. Use 'device=cpu' or pass valid CUDA device(s) if available, "
          "i.e. 'device=0' or 'device=0,1,2,3' for Multi-GPU.\n\ntorch.cuda.is_available(): True\n"
          "torch.cuda.device_count(): {count}\nos.environ['CUDA_VISIBLE_DEVICES']: None\n")


@pytest.mark.parametrize("ids, count, d27", [
    ("0,1", 1, True),        # two processes for one GPU
    ("0,1,2,3", 2, True),
    ("0,1", 0, False),       # no GPU at all: a CPU-only torch or a driver, not too many ranks
    ("1", 1, False),         # one process asking for a GPU that is not there: a wrong index
    ("2,3", 2, False),       # as many ids as GPUs, past the count: physical ids, not too many ranks
])


def test_ultralytics_refusing_more_gpus_than_visible_is_d27(catalog, ids, count, d27):
    d = run(catalog, _ULTRA.format(ids=ids, count=count))
    assert (matches(d)[:1] == ["D27"]) is d27


# deepspeed/launcher/launch.py sigkill_handler: "Killing subprocess {pid}" per rank, then "{cmd} exits with return
# code = {code}", with DeepSpeed's "[date] [LEVEL] [file:line:function]" log prefix
_TEARDOWN = ("[2023-12-05 10:57:26,696] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 2392\n"
             "[2023-12-05 10:57:27,936] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 2393\n")
_LOADED = "12/05/2023 10:57:26 - INFO - loader - trainable params: 21872640 || all params: 13918540800\n"


def _teardown_hint(catalog, text):
    d = run(catalog, text)
    return [f.id for f in d.findings if any(ev.signature == "hint:silent-rank-teardown" for ev in f.evidence)]


_STEPS = "{'loss': 1.3862, 'learning_rate': 4.9e-05, 'epoch': 0.01}\n"
_DATA = "12/05/2023 10:57:26 - WARNING - preprocess - Loading dataset from disk will ignore other data arguments.\n"


@pytest.mark.parametrize("before", [_STEPS * 3, _DATA, _LOADED + _STEPS])
def test_a_teardown_after_a_silent_rank_is_a_possible_d28(catalog, before):
    """Killed mid-training, or with nothing shown of what the ranks were doing: a guess."""
    assert _teardown_hint(catalog, before + _TEARDOWN) == ["D28"]
    d = run(catalog, before + _TEARDOWN)
    assert possible(d)[0] == "D28" and not matches(d)


@pytest.mark.parametrize("loading", [
    _LOADED + _DATA,  # peft's trainable-parameter count, then a data line
    "[INFO|modeling_utils.py:1770] 2023-03-04 18:11:21,751 >> loading weights file /m/t5-xxl/pytorch_model.bin\n",
    "Loading checkpoint shards:  33%|███▎      | 1/3 [00:21<00:42, 21.30s/it]\n",
    "[2024-01-04 20:52:29,958] [INFO] [RANK 1]  > number of parameters on model parallel rank 1: 4520036800\n",
    # a resume under the Trainer's DeepSpeed integration: every rank reads the optimizer states
    "[INFO|deepspeed.py:449] 2022-05-15 00:12:20,447 >> Attempting to resume from out/checkpoint-22\n"
    "[2022-05-15 00:12:51,292] [INFO] [engine.py:2754:_get_all_zero_checkpoint_state_dicts] successfully read 2 ZeRO "
    "state_dicts for rank 0\n",
])
def test_a_silent_teardown_while_the_ranks_load_the_model_is_d28(catalog, loading):
    """Every rank holding its copy of the model in host memory, and one killed without a word: D28."""
    d = run(catalog, loading + _TEARDOWN)
    assert matches(d)[:1] == ["D28"], d.findings


def test_a_teardown_after_a_traceback_or_an_error_exit_says_nothing_of_d28(catalog):
    raised = ("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
              "ValueError: bad config\n")
    assert _teardown_hint(catalog, raised + _TEARDOWN) == []
    exited = _TEARDOWN + ("[2023-12-05 10:57:30,388] [ERROR] [launch.py:321:sigkill_handler] ['python', '-u', "
                          "'train.py', '--local_rank=3'] exits with return code = 1\n")
    assert _teardown_hint(catalog, exited) == []


def _exits(code: int) -> str:
    return ("[2023-07-20 15:45:13,982] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python3', '-u', 'main.py', "
            f"'--local_rank=1', '--deepspeed', 'ds.json'] exits with return code = {code}\n")


def test_the_deepspeed_launchers_sigbus_return_code_leans_d24_not_d28(catalog):
    """Return code -7 is a rank ended by SIGBUS: the /dev/shm lean, and not the OOM killer's SIGKILL."""
    d = run(catalog, _LOADED + _TEARDOWN + _exits(-7))
    assert possible(d)[0] == "D24" and not matches(d), d.findings
    assert "local rank 1" in " ".join(ev.text for ev in d.findings[0].evidence)
    assert _teardown_hint(catalog, _LOADED + _TEARDOWN + _exits(-7)) == []


@pytest.mark.parametrize("code, d28", [(-9, True), (-11, False), (-6, False)])
def test_a_teardown_is_read_as_the_oom_killer_only_for_sigkill(catalog, code, d28):
    d = run(catalog, _LOADED + _TEARDOWN + _exits(code))
    assert (matches(d)[:1] == ["D28"]) is d28, d.findings


def _launched(tmp_path, *options: str, extra: str = "", needs: str = "") -> str:
    """What torch.distributed.launch (torch 2.x) and two workers of a script that parses its options print (needs: a
    required option the command does not give)."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text("import argparse\np = argparse.ArgumentParser()\np.add_argument('-opt', required=True)\n"
                      + (f"p.add_argument({needs!r}, required=True)\n" if needs else "")
                      + "".join(f"p.add_argument({o!r}, type=int, default=0)\n" for o in options)
                      + "p.parse_args()\n")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.launch", "--nproc_per_node=2", *extra.split(),
                           str(script), "-opt", "x"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    return proc.stdout + proc.stderr


def test_a_script_that_only_takes_local_rank_underscored_under_torch2_launch_is_d1(catalog, tmp_path):
    """DDColor #33: the launcher's --local-rank=N is not the script's --local_rank; the log is cut after the usage."""
    out = _launched(tmp_path, "--local_rank")
    assert "unrecognized arguments: --local-rank=" in out  # torch's launcher really passes the dashed form
    cut = "".join(line + "\n" for line in out.splitlines() if "unrecognized arguments" not in line)
    d = run(catalog, cut)
    assert matches(d)[:1] == ["D1"], d.findings
    assert any(ev.signature == "rule:script-rejects-dashed-local-rank" for ev in d.findings[0].evidence)


def test_a_script_that_takes_the_launchers_argument_says_nothing_of_d1(catalog, tmp_path):
    out = _launched(tmp_path, "--local-rank", "--local_rank")
    assert "usage:" not in out, out  # the script parsed what it was given
    d = run(catalog, out)
    assert not any(ev.signature == "rule:script-rejects-dashed-local-rank" for f in d.findings for ev in f.evidence)


def test_a_usage_error_about_another_option_says_nothing_of_d1(catalog, tmp_path):
    """Under --use-env the launcher passes no argument: the script's usage error is about its own options."""
    out = _launched(tmp_path, "--local_rank", extra="--use-env", needs="--data")
    assert "usage:" in out and "--local-rank=" not in out, out
    d = run(catalog, out)
    assert not any(ev.signature == "rule:script-rejects-dashed-local-rank" for f in d.findings for ev in f.evidence)
