"""NCCL's line prefixes ("host:pid:tid [cudaDev]", src/debug.cc) with several processes of one host on one device."""
from __future__ import annotations

from rule_helpers import matches, possible, run


def nccl_lines(rows):
    """rows: (host, pid, device, message) rendered as NCCL 2.x prints its INFO lines."""
    return "".join(f"{host}:{pid}:{pid} [{dev}] NCCL INFO {msg}\n" for host, pid, dev, msg in rows)


BOOT = "Bootstrap : Using eth0:10.0.0.11<0>"
RULE = "hint:processes-share-a-device"


def hinted(d):
    """The findings resting on this rule (D3 may still be guessed from the words of a log full of 'cudaDev 0')."""
    return [f.id for f in d.findings if any(ev.signature == RULE for ev in f.evidence)]


def test_processes_of_one_host_all_on_device_0_are_a_possible_d3(catalog):
    text = nccl_lines([("gpu1", 8194, 0, BOOT), ("gpu1", 8195, 0, BOOT), ("gpu1", 8197, 0, BOOT),
                       ("gpu1", 8194, 0, "Using network Socket")])
    d = run(catalog, text)
    assert possible(d)[0] == "D3" and not matches(d) and hinted(d) == ["D3"]
    top = d.findings[0]
    assert top.evidence[0].line == 1
    assert "3 processes on gpu1, every one on CUDA device 0" in top.evidence[1].text


def test_each_process_on_its_own_device_says_nothing(catalog):
    text = nccl_lines([("gpu1", 8194, 0, BOOT), ("gpu1", 8195, 1, BOOT), ("gpu1", 8197, 2, BOOT)])
    assert not hinted(run(catalog, text))


def test_device_0_everywhere_with_different_bus_ids_is_per_rank_isolation(catalog):
    # CUDA_VISIBLE_DEVICES per rank (SLURM --gpus-per-task): every process sees its own GPU as device 0
    text = nccl_lines([("gpu1", 8194, 0, BOOT), ("gpu1", 8195, 0, BOOT),
                       ("gpu1", 8194, 0, "comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 1b000 - Init COMPLETE"),
                       ("gpu1", 8195, 0, "comm 0x55e0 rank 1 nranks 2 cudaDev 0 busId 3d000 - Init COMPLETE")])
    assert not hinted(run(catalog, text))


def test_one_process_per_host_on_device_0_across_nodes_says_nothing(catalog):
    text = nccl_lines([("node1", 8194, 0, BOOT), ("node2", 9194, 0, BOOT), ("node3", 7194, 0, BOOT)])
    assert not hinted(run(catalog, text))
