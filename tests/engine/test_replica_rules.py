"""Which DataParallel replica failed (engine/replica_rules.py): a copy of the model failing is DataParallel's (P1)."""
from __future__ import annotations

import pytest

from gpudoctor.engine.replica_rules import replica_rule

WORKER = '  File "/usr/lib/python3/site-packages/torch/nn/parallel/parallel_apply.py", line 83, in _worker'


def caught(replica: int, device: int, error: str, exc: str = "RuntimeError") -> str:
    return "\n".join([f"{exc}: Caught {exc} in replica {replica} on device {device}.",
                      "Original Traceback (most recent call last):", WORKER,
                      "    output = module(*input, **kwargs)", error])


def test_replica_one_failing_is_p1_and_cites_its_line():
    [v] = replica_rule(caught(1, 1, "AttributeError: 'Tensor' object has no attribute 'fast'"), "x.log")
    assert (v.entry, v.rule, v.tier) == ("P1", "rule:dataparallel-copy-failed", "match")
    assert v.evidence[0].line == 1 and "replica 1" in v.note


@pytest.mark.parametrize("text", [
    caught(0, 0, "AttributeError: 'NoneType' object has no attribute 'shape'"),  # the original module's own bug
    caught(0, 1, "ValueError: bad shape"),  # replica 0 on device 1 (device_ids=[1, 2]) is still the original
    caught(1, 1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "torch.OutOfMemoryError"),
    "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:1 and cuda:0!",
])
def test_what_a_one_gpu_run_would_meet_too_is_left_alone(text):
    assert replica_rule(text, "x.log") == []


def test_a_device_mismatch_under_the_worker_thread_without_the_caught_line():
    text = "\n".join(["Original Traceback (most recent call last):", WORKER, "    output = module(*input, **kwargs)",
                      '  File "/src/models/d.py", line 17, in forward', "    out = F.relu(self.conv1(x))",
                      "RuntimeError: Expected tensor for argument #1 'input' to have the same device as tensor for "
                      "argument #2 'weight'; but device 1 does not equal 0 (while checking arguments for "
                      "cudnn_convolution)"])
    [v] = replica_rule(text, "x.log")
    assert v.evidence[0].line == 6 and v.evidence[1].line == 2


DP = "/usr/lib/python3/site-packages/torch/nn/parallel"
CUT = ('Traceback (most recent call last):\n  File "train.py", line 227, in train\n    outputs = model(batch)\n'
       f'  File "{DP}/data_parallel.py", line 168, in forward\n'
       "    outputs = self.parallel_apply(replicas, inputs, kwargs)\n"
       f'  File "{DP}/data_parallel.py", line 178, in parallel_apply\n')


@pytest.mark.parametrize("tail", ["", "    return parallel_apply(replicas, inputs", '  File "/usr/lib/python3/site-pa'])
def test_a_traceback_cut_inside_dataparallel_is_a_possible_p1(tail):
    [v] = replica_rule(CUT + tail, "x.log")
    assert (v.entry, v.tier, v.score, v.evidence[0].line) == ("P1", "possible", 0.5, 6)


def test_a_traceback_that_goes_on_past_dataparallel_or_ends_in_its_error_is_not_a_cut_guess():
    assert replica_rule(CUT + '  File "/work/model.py", line 70, in forward\n    x = self.proj(x)\n', "x") == []
    assert replica_rule(CUT + "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n", "x") == []
