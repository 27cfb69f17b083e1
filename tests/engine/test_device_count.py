"""An index past the visible GPUs: which of D3 (device chosen by the global rank) and D27 (more processes than GPUs)
the log supports. By global rank the index passes the GPUs only on a node after the first, so D3 is confident only
where the log shows a launch over several nodes; a script's own failed check of the device count against its ranks
is D27 (yolov5's and YOLOX's asserts, as their tracebacks print them)."""
from __future__ import annotations

import io

import pytest

from gpudoctor.engine.diagnose import diagnose
from gpudoctor.engine.sources import Source
from gpudoctor.kb.catalog import load_catalog

CATALOG = load_catalog(use_cache=False)
ORDINAL = "[rank5]: RuntimeError: CUDA error: invalid device ordinal\n"


def run(text: str):
    d = diagnose(CATALOG, [Source("<stdin>", None, None)], stdin=io.BytesIO(text.encode()))
    return [(f.id, f.tier) for f in d.findings]


def test_an_invalid_ordinal_alone_is_a_guess_that_leans_to_more_ranks_than_gpus():
    found = run(ORDINAL)
    assert found[:2] == [("D27", "possible"), ("D3", "possible")], found


@pytest.mark.parametrize("launch", [
    "+ torchrun --nnodes=2 --node_rank=1 --nproc_per_node=8 --master_addr=10.0.0.1 train.py\n",
    "num_machines: 2\n",
    "SLURM_JOB_NNODES=4\n",
])
def test_an_invalid_ordinal_in_a_launch_over_several_nodes_is_d3(launch):
    assert run(launch + ORDINAL)[0] == ("D3", "match")


# torchrun's banner (torch/distributed/run.py), printed only when it starts more than one process on the node
BANNER = ("*****************************************\n"
          "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being "
          "overloaded, please further tune the variable for optimal performance in your application as needed. \n"
          "*****************************************\n")
OLD_ORDINAL = "THCudaCheck FAIL file=/pytorch/torch/csrc/cuda/Module.cpp line=37 error=101 : invalid device ordinal\n"


@pytest.mark.parametrize("error", [ORDINAL, OLD_ORDINAL])
def test_the_launchers_several_processes_banner_with_no_second_node_makes_an_invalid_ordinal_d27(error):
    found = run(BANNER + "Running process 1\n" + error)
    assert found[0] == ("D27", "match") and ("D3", "match") not in found, found


# torchelastic's agent after one worker failed (torch/distributed/elastic/multiprocessing/api.py, 1.9-2.x)
TEARDOWN = ("WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 4210 closing signal SIGTERM\n"
            "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 4208) of "
            "binary: /usr/bin/python3\n")


def test_the_agent_signalling_the_nodes_other_workers_makes_an_invalid_ordinal_d27():
    found = run(ORDINAL.replace("[rank5]: ", "") + TEARDOWN)
    assert found[0] == ("D27", "match") and ("D3", "match") not in found, found
    assert run("SLURM_JOB_NNODES=2\n" + ORDINAL + TEARDOWN)[0] == ("D3", "match")


# deepspeed/comm/comm.py init_distributed logs "cdb={cdb}" once per process (utils.logger.info, every rank)
DS_START = "[2024-07-20 21:08:49,356] [INFO] [comm.py:637:init_distributed] cdb=None\n"


def test_deepspeeds_per_process_start_line_twice_in_one_console_makes_an_invalid_ordinal_d27():
    found = run(DS_START * 2 + ORDINAL)
    assert found[0] == ("D27", "match") and ("D3", "match") not in found, found
    assert ("D27", "match") not in run(DS_START + ORDINAL)  # one process says nothing of how many share the node


@pytest.mark.parametrize("second_node", ["SLURM_JOB_NNODES=2\n", "  --node_rank=1 --master_addr=10.0.0.1\n"])
def test_the_banner_beside_a_second_node_leaves_the_ordinal_to_the_multi_node_reading(second_node):
    assert ("D27", "match") not in run(BANNER + second_node + ORDINAL)


def test_the_banner_without_an_invalid_ordinal_says_nothing_of_d27():
    assert ("D27", "match") not in run(BANNER + "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")


@pytest.mark.parametrize("tail", [
    # yolov7 train.py: the failing source line, as Python prints it under the frame
    '  File "train.py", line 543, in <module>\n    assert torch.cuda.device_count() > opt.local_rank\nAssertionError\n',
    # yolov5 train.py: the assertion's own message
    '  File "train.py", line 520, in main\n    assert torch.cuda.device_count() > LOCAL_RANK, '
    "'insufficient CUDA devices for DDP command'\nAssertionError: insufficient CUDA devices for DDP command\n",
    # YOLOX tools/train.py
    '  File "tools/train.py", line 123, in <module>\n    assert num_gpu <= get_num_devices()\nAssertionError\n',
])
def test_a_scripts_failed_check_of_the_device_count_against_its_ranks_is_d27(tail):
    assert run("Traceback (most recent call last):\n" + tail)[0] == ("D27", "match")


@pytest.mark.parametrize("tail", [
    # the same comparison written in the source but not failing (no AssertionError): a pasted snippet
    "    assert torch.cuda.device_count() > opt.local_rank\nRuntimeError: something else broke\n",
    # an assertion about something other than ranks or processes
    '  File "t.py", line 3, in <module>\n    assert torch.cuda.device_count() > 0\nAssertionError\n',
])
def test_other_assertions_and_unfailed_checks_are_not_d27(tail):
    assert ("D27", "match") not in run("Traceback (most recent call last):\n" + tail)


def _state(index: int, device: int, n: int = 4) -> str:
    """accelerate's PartialState as a script logs it (state.py __repr__)."""
    return (f"Distributed environment: MULTI_GPU  Backend: nccl\nNum processes: {n}\nProcess index: {index}\n"
            f"Local process index: {index}\nDevice: cuda:{device}\n\nMixed precision type: no\n\n")


DUPLICATE = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, "
             "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.19.3\n"
             "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\nLast error:\n"
             "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 1000\n")


def test_accelerate_mapping_local_processes_onto_fewer_gpus_is_d27_not_d3():
    text = "".join(_state(i, i % 1) for i in range(4)) + DUPLICATE  # one visible GPU: every process on cuda:0
    found = run(text)
    assert found[0] == ("D27", "match") and ("D3", "match") not in found, found


@pytest.mark.parametrize("text", [
    "".join(_state(i, i) for i in range(4)) + DUPLICATE,  # each process on its own index: accelerate did not share
    "".join(_state(i, 0) for i in range(4)) + "RuntimeError: CUDA out of memory.\n",  # per-task binding, no sharing
])
def test_no_accelerate_sharing_verdict_without_both_signs(text):
    from gpudoctor.engine.ordinal_rules import accelerate_modulo_rule

    assert accelerate_modulo_rule(text, "log") == []


@pytest.mark.parametrize("driver", [
    "host:174:239 [0] enqueue.cc:802 NCCL WARN Cuda failure 'API call is not supported in the installed CUDA driver'\n",
    "RuntimeError: CUDA driver version is insufficient for CUDA runtime version\n",
])
def test_an_invalid_ordinal_beside_a_driver_that_cannot_serve_the_runtime_is_neither_d3_nor_d27(driver):
    """A driver/toolkit mismatch: the device index is not what failed (NVIDIA/nccl #496, an R460 driver under
    CUDA enhanced compatibility)."""
    ordinal = "host:174:239 [0] init.cc:895 NCCL WARN Cuda failure 'invalid device ordinal'\n"
    assert ("D3", "match") in run("[1,0]<stdout>:" + ordinal)  # alone, NCCL's ordinal failure is D3's signature
    found = run(driver + ordinal)
    assert not any(entry in ("D3", "D27") for entry, _tier in found), found


DDP_CHECK = ("ValueError: DistributedDataParallel device_ids and output_device arguments only work with "
             "single-device/multiple-device GPU modules or CPU modules, but got device_ids [0], output_device 0, and "
             "module parameters {device(type='cpu')}.\n")


def test_ddp_device_ids_on_a_cpu_module_is_p2_except_on_macos():
    frame = '  File "{}/lib/python3.11/site-packages/torch/nn/parallel/distributed.py", line 1127, in _log_and_throw\n'
    assert run(frame.format("/home/me/.venv") + DDP_CHECK)[0] == ("P2", "match")
    assert ("P2", "match") not in run(frame.format("/Users/me/.pyenv/versions/3.11.9") + DDP_CHECK)
