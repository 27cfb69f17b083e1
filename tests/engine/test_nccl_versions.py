"""QA25 Q23: two hosts loading different NCCL releases, then a truncated message and an internal error: a confident
D19 (a desync in the code) sent the user hunting for a skipped collective; the version split is the cause."""
from __future__ import annotations

from rule_helpers import matches, run

LOG = """node01:1234:1234 [0] NCCL INFO cudaDriverVersion 12020
NCCL version 2.18.1+cuda12.1
node02:5678:5678 [0] NCCL INFO cudaDriverVersion 12020
NCCL version 2.14.3+cuda11.7
node02:5678:5690 [0] NCCL WARN NET/Socket : message truncated : receiving 1024 bytes instead of 4.
node02:5678:5690 [0] NCCL INFO transport/net_socket.cc:424 -> 3
[rank8]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, internal error - please report this issue to the NCCL developers, NCCL version 2.14.3
"""


def test_different_nccl_releases_rule_out_a_desync_and_say_so(catalog):
    d = run(catalog, LOG)
    assert "D19" not in [f.id for f in d.findings]
    assert any("different NCCL releases: 2.18.1 (line 2), 2.14.3 (line 4)" in note for note in d.notes)


def test_one_release_everywhere_is_no_split(catalog):
    d = run(catalog, LOG.replace("2.14.3+cuda11.7", "2.18.1+cuda12.1").replace("NCCL version 2.14.3", "NCCL version 2.18.1"))
    assert not any("different NCCL releases" in note for note in d.notes)
    assert "D19" in matches(d)  # the truncated message alone still reads as a desync
