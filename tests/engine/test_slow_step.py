"""One rank's step that ran as long as the collective timeout, the others' wait ending with it: MN3
(engine/slow_step.py). The bars are tqdm's own format (`n/total [elapsed<remaining, rate]`, elapsed as MM:SS or
H:MM:SS); the failures are torch's and transformers' messages."""
from __future__ import annotations

import io

import pytest

from gpudoctor.engine.diagnose import diagnose
from gpudoctor.engine.slow_step import slow_step_rule
from gpudoctor.engine.sources import Source
from gpudoctor.kb.catalog import load_catalog

CATALOG = load_catalog(use_cache=False)


def bar(elapsed: str, n: int = 1_695_000, total: int = 3_634_744, remaining: str = "33:25") -> str:
    return (f"Running tokenizer on dataset:  47%|████▋     | {n}/{total} [{elapsed}<{remaining}, "
            f"967.30 examples/s]")


BARRIER = """\
Traceback (most recent call last):
  File "/work/train.py", line 40, in main
    with training_args.main_process_first(desc="dataset map pre-processing"):
  File "/usr/lib/python3.10/contextlib.py", line 135, in __enter__
    return next(self.gen)
  File "/venv/lib/python3.10/site-packages/transformers/training_args.py", line 2011, in main_process_first
    dist.barrier()
  File "/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 3441, in barrier
    work = default_pg.barrier(opts=opts)
"""
WATCHDOG = ("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, "
            "NumelOut=1, Timeout(ms)={ms}) ran for {ran} milliseconds before timing out.\n")


def run(text: str):
    return diagnose(CATALOG, [Source("<stdin>", None, None)], stdin=io.BytesIO(text.encode()))


@pytest.mark.parametrize("text", [
    bar("29:55") + BARRIER,  # the bar and the others' traceback on following lines
    bar("30:09") + BARRIER.replace("\n", "\n", 1),
    bar("1:00:40") + "\n" + WATCHDOG.format(ms=3600000, ran=3600091),  # a stated hour
    bar("10:02") + "\n" + WATCHDOG.format(ms=600000, ran=600012),
    bar("09:40") + "\nRuntimeError: Socket Timeout\n",  # NCCL's ten-minute default, nothing stated
    "  ddp_timeout=1800,\n  broadcast_buffers=True,\n" + bar("29:55") + BARRIER,  # wait words before any bar
])
def test_a_bar_as_long_as_the_timeout_before_the_wait_ends_names_mn3(text):
    verdicts = slow_step_rule(text, "log")
    assert [(v.entry, v.rule) for v in verdicts] == [("MN3", "rule:step-as-long-as-timeout")]
    d = run(text)
    assert d.findings[0].id == "MN3" and d.findings[0].tier == "match"
    assert any("progress bar" in ev.text for ev in d.findings[0].evidence)


@pytest.mark.parametrize("text", [
    bar("14:10") + BARRIER,  # far from either default
    bar("29:55") + "\n" + WATCHDOG.format(ms=7200000, ran=7200100),  # the stated timeout is two hours
    bar("29:55", n=3_634_744, total=3_634_744, remaining="00:00") + BARRIER,  # the step had finished
    bar("29:55") + "\nTraceback (most recent call last):\n  File \"t.py\", line 3, in step\n    dist.all_reduce(x)\n"
                   "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",  # its own error
    bar("29:55") + "\nepoch 1 done\n",  # no wait ended after it
    BARRIER + bar("29:55") + "\n",  # the wait ended before the bar
])
def test_no_mn3_from_a_bar_that_is_not_as_long_as_the_wait(text):
    assert slow_step_rule(text, "log") == []


def test_the_last_redraw_of_a_carriage_return_bar_counts():
    line = "\r".join(bar(t) for t in ("29:50", "29:53", "29:55"))
    assert slow_step_rule(line + BARRIER, "log")[0].evidence[1].text.startswith("a progress bar still running "
                                                                               "after 29:55")
    early = "\r".join(bar(t) for t in ("29:50", "05:00"))
    assert slow_step_rule(early + BARRIER, "log") == []
