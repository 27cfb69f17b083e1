"""Horovod's stall report read for who submitted the stalled tensor (engine/stall_rules.py): rank 0 alone is D21."""
from __future__ import annotations

import time

from gpudoctor.engine.stall_rules import rank_zero_alone_rule

HEAD = ("[2024-03-02 10:41:07.118204: W horovod/common/stall_inspector.cc:105] One or more tensors were submitted to be "
        "reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than 60 "
        "seconds. This may indicate that different ranks are trying to submit different tensors or that only subset "
        "of ranks is submitting tensors, which will cause deadlock.")


def report(*rows: str, header: str = "Missing ranks:", tag: str = "[0]<stderr>:") -> str:
    return "\n".join(tag + line for line in (HEAD, header, *rows)) + "\n"


def verdict(text: str):
    found = rank_zero_alone_rule(text, "hvd.log")
    assert len(found) <= 1
    return found[0] if found else None


def test_a_tensor_every_rank_but_zero_is_missing_is_d21_and_cites_the_report():
    v = verdict(report("1: [allreduce.val_loss]", "2: [allreduce.val_loss]", "3: [allreduce.val_loss]"))
    assert (v.entry, v.rule) == ("D21", "rule:stall-rank-zero-alone")
    assert v.evidence[0].line == 2 and "Missing ranks" in v.evidence[0].text
    assert "ranks 1 to 3 are missing it" in v.evidence[1].text and v.evidence[1].line == 3


def test_rank_zero_missing_other_tensors_still_submitted_this_one():
    v = verdict(report("0: [allreduce.grad_norm]", "1: [broadcast.best_path]", "2: [broadcast.best_path]",
                       "3!: [broadcast.best_path]"))
    assert v is not None and "broadcast.best_path" in v.evidence[1].text


def test_the_older_stalled_ranks_header_reads_the_same():
    assert verdict(report("1: [allreduce.acc]", "2: [allreduce.acc]", header="Stalled ranks:")) is not None


def test_no_ruling_when_rank_zero_is_missing_it_too_or_its_list_was_cut():
    assert verdict(report("0: [broadcast.sz]", "1: [broadcast.sz]", "2: [broadcast.sz]")) is None
    cut = "0: [a.1, a.2, a.3, a.4, a.5, a.6 ...]"
    assert verdict(report(cut, "1: [broadcast.sz]", "2: [broadcast.sz]")) is None


def test_no_ruling_for_two_ranks_a_gap_in_the_ranks_or_gradients():
    assert verdict(report("1: [allreduce.val_loss]")) is None  # a job of two: rank 1 may simply have run out of data
    assert verdict(report("1: [allreduce.x]", "3: [allreduce.x]")) is None  # rank 2 submitted it as well
    grads = "DistributedAdamOptimizer_Allreduce/grad_w"
    assert verdict(report(f"1: [{grads}]", f"2: [{grads}]")) is None


def test_the_old_layout_by_tensor():
    old = "WARNING: " + HEAD + "\nStalled ops:\n"
    assert verdict(old + "HorovodBroadcast_step_0 [missing ranks: 1, 2, 3]\n") is not None
    assert verdict(old + "HorovodBroadcast_step_0 [ready ranks: 0]\n") is not None
    assert verdict(old + "HorovodAllreduce_loss_0 [missing ranks: 2, 5]\n") is None
    assert verdict(old + "HorovodAllreduce_loss_0 [ready ranks: 1]\n") is None


def test_a_header_without_rows_or_with_garbage_rows_gives_nothing():
    assert verdict(report()) is None
    assert verdict(report("not a row", "1: [x]", "2: [x]")) is None  # the rows stop at the first line that is not one


def test_a_huge_report_is_read_in_bounded_time():
    rows = [f"{r}: [allreduce.metric_{r % 7}]" for r in range(1, 50_000)]
    start = time.perf_counter()
    assert verdict(report(*rows)) is None  # the rank lists name different tensors: no single one every rank misses
    assert time.perf_counter() - start < 2.0
