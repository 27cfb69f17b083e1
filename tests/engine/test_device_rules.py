"""Device-mismatch errors read by where they happened (engine/device_rules.py), through the whole diagnosis."""
from __future__ import annotations

import pytest

from rule_helpers import matches, possible, run

TWO_GPUS = ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:1 and "
            "cuda:0! (when checking argument for argument index in method wrapper_CUDA__index_select)")
OLD_TWO_GPUS = ("RuntimeError: Expected tensor for argument #1 'input' to have the same device as tensor for argument "
                "#2 'weight'; but device 1 does not equal 0 (while checking arguments for cudnn_convolution)")
EMBEDDING = ['  File "/opt/env/lib/python3.11/site-packages/torch/nn/functional.py", line 2233, in embedding',
             "    return torch.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)"]


@pytest.mark.parametrize("error", [TWO_GPUS, OLD_TWO_GPUS])
def test_two_gpus_in_one_process_is_first_guessed_as_dataparallel(catalog, error):
    d = run(catalog, "\n".join(["Traceback (most recent call last):", *EMBEDDING, error]))
    assert matches(d) == []
    assert possible(d)[:1] == ["P1"]
    [first] = [f for f in d.findings if f.id == "P1"]
    assert first.signatures == ("hint:two-gpus-one-process",) and first.evidence[0].line == 4


@pytest.mark.parametrize("context", [
    "[rank1]: Traceback (most recent call last):",  # ranks of a launcher: each has a GPU of its own, not DataParallel
    "model = AutoModelForCausalLM.from_pretrained(path, device_map='auto')",  # one process split the model on purpose
    '  File "/opt/env/lib/python3.11/site-packages/accelerate/hooks.py", line 166, in new_forward',
])
def test_a_second_process_or_a_split_model_gets_no_dataparallel_guess(catalog, context):
    d = run(catalog, "\n".join([context, *EMBEDDING, TWO_GPUS]))
    assert not any(f.signatures == ("hint:two-gpus-one-process",) for f in d.findings)


def test_a_gpu_and_the_cpu_are_not_two_gpus(catalog):
    d = run(catalog, "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
                     "cuda:0 and cpu!")
    assert not any(f.signatures == ("hint:two-gpus-one-process",) for f in d.findings)
    assert (matches(d) + possible(d))[:1] == ["P4"]


@pytest.mark.parametrize("asked, has, d27", [
    ("[0, 1]", "[0]", True),  # two processes, one GPU: the count
    ("[0, 1, 2, 3, 4, 5]", "[0, 1, 2]", True),
    ("[1]", "[0]", False),  # one process asking for GPU 1 on a one-GPU machine: the id, not the count
    ("[2, 3]", "[0, 1, 2]", False),  # physical ids under CUDA_VISIBLE_DEVICES
])
def test_lightning_requested_ids_name_d27_only_when_more_are_asked_than_seen(catalog, asked, has, d27):
    text = ("lightning_fabric.utilities.exceptions.MisconfigurationException: You requested gpu: " + asked +
            "\n But your machine only has: " + has + "\n")
    d = run(catalog, text)
    assert ("D27" in matches(d)) == d27
    if not d27:
        assert any("not D27" in n and "count fits" in n for n in d.notes)


def test_the_requested_ids_in_an_exception_repr_on_one_line(catalog):
    d = run(catalog, "MisconfigurationException('You requested gpu: [1]\\n But your machine only has: [0]')")
    assert "D27" not in matches(d)


def test_lightning_refusing_a_gpu_named_twice_is_d27(catalog):
    d = run(catalog, "pytorch_lightning.utilities.exceptions.MisconfigurationException: Device ID's (GPU) must be "
                     "unique.")
    assert matches(d)[:1] == ["D27"]
