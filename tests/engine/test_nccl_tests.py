"""nccl-tests output from one host that stopped before its first result row (engine/nccl_tests.py). The lines are
nccl-tests' own formats (src/common.cu): the devices, the table header, the rows."""
from __future__ import annotations

import pytest

from gpudoctor.engine.nccl_tests import stopped_tests_rule

HEAD = ("# nThread 1 nGpus 4 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
        "validation: 1 graph: 0\n#\n# Using devices\n")
TABLE = ("#\n#                                                              out-of-place                       in-place\n"
         "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw "
         "#wrong\n")
ROW = "           8             2     float     sum      -1    36.51    0.00    0.00      0    35.92    0.00    0.00      0\n"


def devices(names, hosts=("node1",)):
    return "".join(f"#  Rank {r:2d} Group  0 Pid  15833 on {hosts[r % len(hosts)]:>10} device {r:2d} [0x{r + 2:02x}] {n}\n"
                   for r, n in enumerate(names))


PCIE = ["NVIDIA GeForce RTX 3090"] * 4
SXM = ["NVIDIA H100 80GB HBM3"] * 8


def test_one_pcie_host_with_no_row_is_d25():
    (v,) = stopped_tests_rule(HEAD + devices(PCIE) + TABLE, "log")
    assert (v.entry, v.tier) == ("D25", "match") and v.evidence[0].line == 4


def test_nccl_notes_about_a_missing_verbs_library_do_not_count_as_an_error():
    warn = "host:1:1 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]\n"
    assert [v.entry for v in stopped_tests_rule(HEAD + devices(PCIE) + warn, "log")] == ["D25"]


def test_an_nvswitch_host_makes_the_fabric_manager_only_possible():
    (v,) = stopped_tests_rule(HEAD + devices(SXM) + TABLE, "log")
    assert (v.entry, v.tier) == ("MN1", "possible")


@pytest.mark.parametrize("text", [
    HEAD + devices(PCIE) + TABLE + ROW,  # a size completed
    HEAD + devices(PCIE, hosts=("node1", "node2")) + TABLE,  # two hosts: the network takes part
    HEAD + devices(PCIE) + "node1:1:2 [0] transport/p2p.cc:204 NCCL WARN Cuda failure 'peer access is not supported'\n",
    HEAD + devices(PCIE[:1]) + TABLE,  # one GPU: no peer path
    devices(PCIE) + TABLE,  # not nccl-tests' header
])
def test_no_verdict_when_a_row_an_error_a_second_host_or_one_gpu_explains_it(text):
    assert stopped_tests_rule(text, "log") == []
