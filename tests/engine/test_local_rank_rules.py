"""Lightning's per-process announcements of local rank and group membership: every process at local rank 0 on nodes
that see several GPUs is D3; a per-task binding (one GPU each) or local ranks that go up are not."""
from __future__ import annotations

import io

import pytest

from gpudoctor.engine.diagnose import diagnose
from gpudoctor.engine.sources import Source
from gpudoctor.kb.catalog import load_catalog

CATALOG = load_catalog(use_cache=False)


def run(text: str):
    d = diagnose(CATALOG, [Source("<stdin>", None, None)], stdin=io.BytesIO(text.encode()))
    return [(f.id, f.tier) for f in d.findings]


def announce(locals_: list[int], devices: str, world: int, old: bool = False) -> str:
    """What each process logs, in Lightning's words (accelerators/cuda.py, lightning_fabric/utilities/distributed.py;
    1.x wrote "initializing ddp:")."""
    head = "initializing ddp" if old else "Initializing distributed"
    return "".join(f"LOCAL_RANK: {local} - CUDA_VISIBLE_DEVICES: [{devices}]\n"
                   f"{head}: GLOBAL_RANK: {g}, MEMBER: {g + 1}/{world}\n" for g, local in enumerate(locals_))


@pytest.mark.parametrize("old", [True, False])
def test_every_process_at_local_rank_0_on_two_gpu_nodes_is_d3(old):
    """Lightning #7027: two nodes of two GPUs, four processes, each announcing local rank 0."""
    assert run(announce([0, 0, 0, 0], "0,1", 4, old))[0] == ("D3", "match")


@pytest.mark.parametrize("locals_, devices, world", [
    ([0, 1, 0, 1], "0,1", 4),  # two nodes, local ranks 0 and 1 on each: as it should be
    ([0, 0, 0, 0], "0", 4),  # one GPU bound per task (srun --gpus-per-task): local rank 0 everywhere by design
    ([0, 0, 0, 0], "0,1,2,3", 16),  # four of sixteen at local rank 0: one per node, as four nodes of four give
    ([0], "0,1", 2),  # one process's announcement says nothing of the others
])
def test_local_ranks_a_launch_gives_say_nothing(locals_, devices, world):
    assert ("D3", "match") not in run(announce(locals_, devices, world))
