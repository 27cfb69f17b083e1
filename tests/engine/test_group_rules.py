"""Who asked for the default process group (engine/group_rules.py): the job's own code is D1, and so is a SyncBatchNorm
layer in a one-process run, with the fix step for a run meant for one GPU."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from gpudoctor.engine.group_rules import no_group_caller_rule

C10D = "/opt/conda/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py"
ERROR = "ValueError: Default process group has not been initialized, please make sure to call init_process_group."


def frames(*pairs: tuple[str, str, str]) -> list[str]:
    out = []
    for path, fn, code in pairs:
        out += [f'  File "{path}", line 12, in {fn}', f"    {code}"]
    return out


C10D_FRAMES = frames((C10D, "get_rank", "default_pg = _get_default_group()"),
                     (C10D, "_get_default_group", "raise ValueError("))


@pytest.fixture(scope="module")
def real_traceback(tmp_path_factory) -> str:
    """torch's own traceback: a plain `python script.py` whose code asks for the world size."""
    script = tmp_path_factory.mktemp("nogroup") / "shard.py"
    script.write_text(textwrap.dedent("""\
        import torch.distributed as dist

        def shard_size(n):
            return n // dist.get_world_size()

        print(shard_size(10))
        """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Default process group" in done.stderr, done.stderr[-2000:]
    return done.stderr


def test_torchs_own_traceback_names_d1_and_the_scripts_line(real_traceback):
    [v] = no_group_caller_rule(real_traceback, "err.log")
    assert (v.entry, v.rule, v.tier, v.rule_out) == ("D1", "rule:group-asked-for-by-the-script", "match", False)
    assert "Default process group" in v.evidence[0].text
    assert "shard_size" in v.evidence[1].text and "dist.get_world_size()" in v.evidence[1].text


def test_diagnose_puts_d1_first_as_a_match(real_traceback, tmp_path):
    log = tmp_path / "err.log"
    log.write_text(real_traceback)
    done = subprocess.run([sys.executable, "-m", "gpudoctor", "diagnose", "--json", str(log)],
                          capture_output=True, text=True, timeout=120)
    first = json.loads(done.stdout)["findings"][0]
    assert (first["id"], first["tier"], done.returncode) == ("D1", "match", 0)


# torch 1.x's SyncBatchNorm.forward asked for the world size in training even without a group (2.x falls back to
# plain BatchNorm, so no real run on this machine prints it); mmcv's SyncBN still does
SYNC_BN_TRACEBACK = "\n".join(["Traceback (most recent call last):",
                               *frames(("/work/train.py", "main", "out = model(x)"),
                                       ("/usr/lib/python3/site-packages/torch/nn/modules/batchnorm.py", "forward",
                                        "world_size = torch.distributed.get_world_size(process_group)")),
                               *C10D_FRAMES, ERROR])


def test_syncbatchnorm_asking_names_d1_by_the_layer():
    [v] = no_group_caller_rule(SYNC_BN_TRACEBACK, "x.log")
    assert (v.entry, v.rule, v.rule_out) == ("D1", "rule:syncbn-without-group", False)
    assert "batchnorm.py" in v.evidence[1].text and v.evidence[1].line == 4
    assert "plain BatchNorm" in v.note


def test_diagnose_points_a_syncbn_run_to_the_one_gpu_fix_step(tmp_path):
    log = tmp_path / "err.log"
    log.write_text(SYNC_BN_TRACEBACK + "\n")
    done = subprocess.run([sys.executable, "-m", "gpudoctor", "diagnose", "--json", str(log)],
                          capture_output=True, text=True, timeout=120)
    first = json.loads(done.stdout)["findings"][0]
    assert (first["id"], first["tier"], done.returncode) == ("D1", "match", 0)
    assert "BatchNorm" in json.dumps(first.get("fix_step") or first)


def test_a_cut_traceback_with_only_torchs_frames_proves_nothing():
    assert no_group_caller_rule("\n".join(["Traceback (most recent call last):", *C10D_FRAMES, ERROR]), "x") == []
    assert no_group_caller_rule(ERROR, "x") == []


def test_the_error_line_first_counts_when_the_frames_below_reach_torch_distributed():
    below = frames(("/src/maisi/train.py", "train", "parts = partition(data, num_partitions=dist.get_world_size())"))
    [v] = no_group_caller_rule("\n".join([ERROR, *below, *C10D_FRAMES]), "x")
    assert v.evidence[1].line == 2
    # the caller's own line calls torch.distributed: enough without torch's frames (the paste stops there)
    assert no_group_caller_rule("\n".join([ERROR, *below]), "x")
    # frames below that neither reach torch.distributed nor call it belong to something else
    other = frames(("/src/app/io.py", "load", "data = json.load(f)"))
    assert no_group_caller_rule("\n".join([ERROR, *other]), "x") == []


def test_the_frames_below_stop_at_the_next_error():
    text = "\n".join([ERROR, "KeyError: 'images'", *frames(("/src/a.py", "f", "dist.get_rank()")), *C10D_FRAMES])
    assert no_group_caller_rule(text, "x") == []


def test_the_source_line_quoted_in_a_frame_is_not_the_error():
    quoted = ['  File "' + C10D + '", line 187, in _check_default_pg', '    "Default process group is not initialized"']
    text = "\n".join(["Traceback (most recent call last):", *frames(("/src/eval.py", "main", "r = dist.get_rank()")),
                      *quoted, "AssertionError: Default process group is not initialized"])
    [v] = no_group_caller_rule(text, "x")
    assert v.evidence[0].line == 6 and v.evidence[1].line == 2


def test_workers_torch_xla_started_are_not_d1():
    """A TPU job: torch_xla's launcher started one worker per core, so no launcher is missing."""
    text = "\n".join(["Traceback (most recent call last):",
                      *frames(("/usr/local/lib/python3.8/dist-packages/fairseq_cli/train.py", "cli_main",
                               "distributed_utils.call_main(args, main)"),
                              ("/usr/local/lib/python3.8/dist-packages/torch_xla/distributed/xla_multiprocessing.py",
                               "spawn", "start_method=start_method)")),
                      "AssertionError: Default process group is not initialized"])
    [v] = no_group_caller_rule(text, "x.log")
    assert (v.entry, v.rule_out, v.evidence[0].line) == ("D1", True, 4)
    log = "\n".join(["AssertionError: Default process group is not initialized", text])
    assert no_group_caller_rule(log.replace("torch_xla/distributed/xla_multiprocessing", "torch/multiprocessing/spawn"),
                                "x.log") == []


def test_a_traceback_cut_inside_the_function_that_raises_the_missing_group_error_is_d1():
    """_get_default_group raises nothing else: a paste cut at that frame (its name cut too) still names D1."""
    cut = "\n".join(["Traceback (most recent call last):",
                     *frames(("/work/trainer.py", "evaluate", "self.args.local_rank = torch.distributed.get_rank()"),
                             (C10D, "get_rank", "default_pg = _get_default_group()")),
                     f'  File "{C10D}", line 411, in _get_default_grou'])
    [v] = no_group_caller_rule(cut, "x.log")
    assert (v.entry, v.rule, v.score) == ("D1", "rule:group-asked-for-by-the-script", 0.6)
    assert v.evidence[0].line == 6 and "trainer.py" in v.evidence[1].text
    # cut one frame higher, in get_rank, which raises other errors too: nothing
    assert no_group_caller_rule(cut.rsplit("\n", 1)[0], "x.log") == []
    # a frame of _get_default_group that is not the innermost says nothing by itself
    assert no_group_caller_rule(cut + "\n  File \"/work/other.py\", line 3, in f", "x.log") == []
