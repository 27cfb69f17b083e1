"""D26's patch: model surgery inside a rank-0 branch moves before it, so every rank builds the same model."""
from __future__ import annotations

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.patches.reshape import reshape_on_every_rank

HEAD = "from torch.nn.parallel import DistributedDataParallel as DDP\n"


def test_the_surgery_and_what_it_depends_on_leave_the_branch_the_rest_stays():
    source = HEAD + ("if dist.get_rank() == 0:\n    tokenizer.add_tokens(['<x>'])\n"
                     "    model.resize_token_embeddings(len(tokenizer))\n    print('resized')\nmodel = DDP(model)\n")
    new, notes = reshape_on_every_rank(source, "t.py", {})
    assert new == HEAD + ("tokenizer.add_tokens(['<x>'])\nmodel.resize_token_embeddings(len(tokenizer))\n"
                          "if dist.get_rank() == 0:\n    print('resized')\nmodel = DDP(model)\n")
    assert "resize_token_embeddings" in notes[0]


def test_an_emptied_branch_goes():
    source = HEAD + "def build(args, model):\n    if args.local_rank == 0:\n        model.fc = nn.Linear(8, 2)\n" \
                    "    return DDP(model)\n"
    new, _ = reshape_on_every_rank(source, "t.py", {})
    assert new == HEAD + "def build(args, model):\n    model.fc = nn.Linear(8, 2)\n    return DDP(model)\n"


@pytest.mark.parametrize("source, why", [
    (HEAD + "if rank == 0:\n    model.fc = nn.Linear(8, 2)\nelse:\n    model.fc = nn.Linear(8, 3)\n", "else branch"),
    (HEAD + "if rank == 0:\n    torch.save(model.state_dict(), 'a.pt')\n    model.add_module('x', m)\n",
     "calls torch.save"),
    (HEAD + "if rank == 0:\n    print('hello')\n", "no layers added or resized"),
    ("if rank == 0:\n    model.fc = nn.Linear(8, 2)\n", "not a DDP script"),
])
def test_left_alone(source, why):
    with pytest.raises(NotApplicable, match=why):
        reshape_on_every_rank(source, "t.py", {})
