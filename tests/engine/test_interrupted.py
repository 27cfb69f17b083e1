"""Ranks stopped by hand (Ctrl-C): KeyboardInterrupt is no rank's own error, and where it landed is where it waited."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from gpudoctor.engine.ranks import classify
from gpudoctor.engine.tracebacks import parse_tracebacks

JOB = textwrap.dedent("""\
    import sys, time
    from datetime import timedelta
    import torch.distributed as dist

    rank = int(sys.argv[1])
    dist.init_process_group("gloo", rank=rank, world_size=2, init_method=f"tcp://127.0.0.1:{sys.argv[2]}",
                            timeout=timedelta(seconds=120))

    def evaluate_and_save():
        dist.barrier()

    def load_next_shard():
        time.sleep(120)

    print("ready", flush=True)
    evaluate_and_save() if rank == 0 else load_next_shard()
    """)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def interrupted_log(tmp_path_factory) -> str:
    """Two real gloo ranks, rank 0 waiting in a barrier its peer never reaches, both sent SIGINT: torch prints each
    rank's KeyboardInterrupt with its "[rankN]:" prefix (rank 0's chained behind the peer's closed connection when
    rank 1 goes first)."""
    work = tmp_path_factory.mktemp("ctrl_c")
    (work / "job.py").write_text(JOB)
    port = _free_port()
    # each rank writes to a file of its own: with pipes read one after the other, a rank whose output filled its
    # pipe blocked on the write, alive, and its peer waited for it in the barrier past the timeout below
    outs = [work / f"rank{r}.out" for r in (0, 1)]
    handles = [open(out, "w") for out in outs]
    # a shell that starts pytest in the background (`cmd &` without job control) has it ignore SIGINT, and the ranks
    # would inherit that: Ctrl-C must reach them as it does at a terminal
    procs = [subprocess.Popen([sys.executable, "job.py", str(r), str(port)], cwd=work, text=True, stdout=handle,
                              stderr=subprocess.STDOUT, preexec_fn=_default_sigint)
             for r, handle in zip((0, 1), handles)]
    try:
        deadline = time.monotonic() + 120
        while not all("ready" in out.read_text() for out in outs):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), [o.read_text() for o in outs]
            time.sleep(0.05)
        time.sleep(1.0)  # rank 0 is inside the barrier by now
        for p in procs:
            p.send_signal(signal.SIGINT)
        for p in procs:
            p.wait(timeout=60)
        return "".join(out.read_text() for out in outs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for handle in handles:
            handle.close()


def _diagnose(tmp_path, text: str) -> tuple[int, dict]:
    log = tmp_path / "run.log"
    log.write_text(text)
    done = subprocess.run([sys.executable, "-m", "gpudoctor", "diagnose", "--json", str(log)],
                          capture_output=True, text=True, timeout=120)
    return done.returncode, json.loads(done.stdout)


def test_a_real_ctrl_c_is_no_crash_and_names_where_rank_0_waited(interrupted_log, tmp_path):
    assert interrupted_log.count("KeyboardInterrupt") >= 2, interrupted_log
    code, data = _diagnose(tmp_path, interrupted_log)
    status = {r["rank"]: r["status"] for r in data["ranks"]}
    assert status == {0: "stopped", 1: "stopped"}, data["ranks"]
    assert any("stopped by hand" in v and "rank 0 was waiting in barrier" in v for v in data["verdict"]), data["verdict"]
    # nothing failed: no rank "failed first", no confident cause
    assert not any("failed first" in v for v in data["verdict"])
    assert [f["id"] for f in data["findings"] if f["tier"] == "match"] == [] and code == 1


OOM_RANK1 = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/src/train.py", line 88, in <module>
[rank1]:     loss = model(batch).loss
[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.15 GiB of which 1.02 GiB is free.
"""
CTRL_C_RANK0 = """\
^CW1128 10:41:07.118000 3471 torch/distributed/elastic/agent/server/api.py:704] Received Signals.SIGINT death signal, shutting down workers
[rank0]: Traceback (most recent call last):
[rank0]:   File "/src/train.py", line 95, in <module>
[rank0]:     dist.all_reduce(stats)
[rank0]:   File "/usr/lib/python3/site-packages/torch/distributed/c10d_logger.py", line 81, in wrapper
[rank0]:     return func(*args, **kwargs)
[rank0]:   File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 2501, in all_reduce
[rank0]:     work.wait()
[rank0]: KeyboardInterrupt
"""


def test_a_rank_stopped_by_hand_in_a_collective_after_another_crashed_is_d20(tmp_path):
    code, data = _diagnose(tmp_path, OOM_RANK1 + CTRL_C_RANK0)
    assert [f["id"] for f in data["findings"] if f["tier"] == "match"][:1] == ["D20"] and code == 0, data["findings"]
    assert any("rank 1 failed first" in v for v in data["verdict"])
    # the OOM alone says nothing of the others waiting for it
    _, alone = _diagnose(tmp_path, OOM_RANK1)
    assert "D20" not in [f["id"] for f in alone["findings"] if f["tier"] == "match"]


def test_keyboard_interrupt_is_classified_apart_from_crashes():
    assert classify("KeyboardInterrupt") == "interrupted"
    assert classify("[rank0]: KeyboardInterrupt") == "interrupted"
    assert classify("RuntimeError: CUDA error: an illegal memory access was encountered") == "crash"


@pytest.mark.parametrize("header", ["^CTraceback (most recent call last):",
                                    "^CTraceback (most recent call last):            │"])
def test_the_terminals_ctrl_c_echo_before_a_header_still_opens_a_traceback(header):
    lines = [header, '  File "train.py", line 3, in <module>', "    main()", "KeyboardInterrupt"]
    [tb] = parse_tracebacks(lines)
    assert tb.exc_type == "KeyboardInterrupt" and len(tb.frames) == 1
