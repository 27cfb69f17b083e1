"""QA25 Q2: D3 for a global rank kept as an attribute (self.rank) and for device strings built by concatenation,
str.format and %-formatting, as it already was for f"cuda:{rank}" and set_device(rank)."""
from __future__ import annotations

import pytest

from gpudoctor.engine.lint import lint_source

HEAD = "import torch\nimport torch.distributed as dist\n\ndist.init_process_group('nccl')\nrank = dist.get_rank()\n"


@pytest.mark.parametrize("line", ['device = torch.device("cuda:" + str(rank))',
                                  'device = torch.device("cuda:{}".format(rank))',
                                  'device = torch.device("cuda:%d" % rank)'])
def test_device_strings_built_from_the_global_rank(line):
    [finding] = lint_source(HEAD + line + "\n", "t.py", select=["D3"]).findings
    assert finding.line == 6 and finding.severity == "error"


def test_the_global_rank_kept_on_self():
    text = ("import torch\nimport torch.distributed as dist\n\n\nclass Trainer:\n    def __init__(self):\n"
            "        dist.init_process_group('nccl')\n        self.rank = dist.get_rank()\n"
            "        torch.cuda.set_device(self.rank)\n")
    [finding] = lint_source(text, "t.py", select=["D3"]).findings
    assert finding.line == 9


@pytest.mark.parametrize("line", ['device = torch.device("cuda:" + str(local_rank))',
                                  'device = torch.device("cuda:{}".format(local_rank))',
                                  "device = torch.device(args.device)"])
def test_the_local_rank_or_a_configured_device_is_left_alone(line):
    text = HEAD + "import os\nlocal_rank = int(os.environ['LOCAL_RANK'])\n" + line + "\n"
    assert not lint_source(text, "t.py", select=["D3"]).findings
