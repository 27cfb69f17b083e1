"""D3's fix takes every form lint flags (QA23 A19), and neither flags nor rewrites cuda:0 where the script pins one GPU
per process through CUDA_VISIBLE_DEVICES (QA23 A15)."""
from __future__ import annotations

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.patches.device import device_from_local_rank
from gpudoctor.engine.lint.runner import lint_source

GLOBAL = """import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
rank = dist.get_rank()
model = torch.nn.Linear(4, 4).cuda(rank)
model = DDP(model, device_ids=[rank])
dev = torch.device("cuda", int(os.environ["RANK"]))
"""


def _d3(text):
    return [f.line for f in lint_source(text, "t.py", select=["D3"]).findings]


def test_every_form_lint_flags_is_rewritten_and_lint_is_then_clean():
    assert _d3(GLOBAL) == [8, 9, 10]
    new, _notes = device_from_local_rank(GLOBAL, "t.py", {})
    assert ".cuda(local_rank)" in new and "device_ids=[local_rank]" in new and 'torch.device("cuda", local_rank)' in new
    assert _d3(new) == []


@pytest.mark.parametrize("pin", ['os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank)',
                                 'os.environ.setdefault("CUDA_VISIBLE_DEVICES", str(local_rank))',
                                 "os.environ.update(CUDA_VISIBLE_DEVICES=str(local_rank))"])
def test_cuda_0_is_right_when_the_script_pins_one_gpu_per_process(pin):
    text = ("import os\nimport torch\nimport torch.distributed as dist\n\nlocal_rank = int(os.environ['LOCAL_RANK'])\n"
            f"{pin}\ndist.init_process_group('nccl')\ndevice = torch.device('cuda:0')\n")
    assert _d3(text) == []
    with pytest.raises(NotApplicable, match="sees its one GPU as cuda:0"):
        device_from_local_rank(text, "t.py", {})
    unpinned = text.replace(pin + "\n", "")
    assert _d3(unpinned) == [7]  # the same script without the pin (a line shorter): every rank on GPU 0
