"""QA25 Q15: one rank's long step in its own file, the others' timeout in theirs: MN3 from per-rank logs, as from the
same lines in one file. Each file alone shows only half: a rank that printed nothing wrong, a rank that timed out."""
from __future__ import annotations

import pytest

from gpudoctor.engine.diagnose import diagnose
from gpudoctor.engine.sources import resolve

BAR = ("Map (num_proc=8):   0%|          | 0/4200000 [00:00<?, ? examples/s]\n"
       "Map (num_proc=8):  50%|#####     | 2100000/4200000 [{half}<19:35, 1786.42 examples/s]\n"
       "Map (num_proc=8):  86%|########  | 3612000/4200000 [{elapsed}<05:30, 1777.00 examples/s]\n")
WAIT = ("[rank1]: INFO Loading cached processed dataset at /cache/json/default/cache-8d1f.arrow\n"
        "[rank1]:[E1128 10:30:05.121000 2211 torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=1800000) ran for 1800081 milliseconds before timing out.\n"
        "[rank1]:[E1128 10:30:05.122000 2211 torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1633] [PG ID 0 PG GUID "
        "0(default_pg) Rank 1] Timeout at NCCL work: 1, last enqueued NCCL work: 1, last completed NCCL work: -1.\n")


def _run(catalog, tmp_path, elapsed: str, own_error: str = ""):
    (tmp_path / "rank0.log").write_text(BAR.format(half="16:40", elapsed=elapsed) + own_error)
    (tmp_path / "rank1.log").write_text(WAIT)
    return diagnose(catalog, resolve([str(tmp_path)]))


def test_the_bar_in_one_ranks_file_and_the_timeout_in_anothers_read_mn3(catalog, tmp_path):
    d = _run(catalog, tmp_path, "33:52")
    top = d.findings[0]
    assert (top.id, top.tier) == ("MN3", "match")
    assert {ev.file.rsplit("/", 1)[-1] for ev in top.evidence} >= {"rank0.log", "rank1.log"}
    assert any("33:52" in note and "30:00 timeout" in note for note in d.notes)


@pytest.mark.parametrize("elapsed, own_error", [("12:10", ""),  # far shorter than the timeout: a coincidence
                                                ("33:52", "torch.OutOfMemoryError: CUDA out of memory.\n")])
def test_a_short_bar_or_a_bar_followed_by_its_ranks_own_error_is_no_slow_step(catalog, tmp_path, elapsed, own_error):
    d = _run(catalog, tmp_path, elapsed, own_error)
    assert not any(s == "rule:step-as-long-as-timeout" for f in d.findings for s in f.signatures)
