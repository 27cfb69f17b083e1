"""Python tracebacks: chained exceptions, faulthandler dumps, interleaved ranks, user frames."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudoctor.engine.prefix import parse_prefix
from gpudoctor.engine.tracebacks import is_user_path, parse_traceback, parse_tracebacks
from gpudoctor.engine.watchdog import parse_watchdog

DATA = Path(__file__).resolve().parent.parent / "data" / "lines"


def _lines(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8", errors="replace").splitlines()


def _body(line: str) -> str:
    return parse_prefix(line).body


def _posted(containing: str) -> str:
    return next(line for line in _lines("posted_formats.txt") if containing in line and not line.startswith("#"))


def test_chained_traceback_from_our_run() -> None:
    tbs = parse_tracebacks(_lines("torchrun_rank1_raises.log"))
    worker = tbs[0]
    assert worker.rank == 1
    assert (worker.exc_type, worker.message) == ("ValueError", "training step failed")
    assert [(e.exc_type, e.link) for e in worker.chain] == [("RuntimeError", None), ("ValueError", "cause")]
    assert worker.root.message == "bad batch at step 7: shape mismatch [4, 3] vs [4, 5]"
    assert [f.function for f in worker.root.frames] == ["main", "load_batch"]
    assert worker.blame is not None and worker.blame.function == "main"
    assert worker.blame.source == 'raise ValueError("training step failed") from e'
    wrapper = [f for f in worker.frames if "site-packages" in f.file]
    assert wrapper and not any(f.is_user for f in wrapper)
    assert all(f.is_user for f in worker.user_frames) and len(worker.user_frames) == 2
    # torchrun's own ChildFailedError, then the worker's traceback as embedded in the summary
    agent = tbs[1]
    assert agent.exc_type == "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"
    assert "Root Cause (first observed failure):" in agent.message
    assert agent.blame is None  # torchrun's shim and torch's frames are nobody's user code
    embedded = tbs[2]
    assert [e.exc_type for e in embedded.chain] == ["RuntimeError", "ValueError"]


def test_both_ranks_raise() -> None:
    lines = _lines("torchrun_both_raise.log")
    tbs = parse_tracebacks(lines)
    by_rank = {tb.rank: tb for tb in tbs if tb.rank is not None}
    assert by_rank[1].exc_type == "RuntimeError"
    assert [(e.exc_type, e.link) for e in by_rank[0].chain] == [("IndexError", None), ("KeyError", "context")]
    assert by_rank[0].message == "'missing_key'"
    logged = tbs[0]  # logging.exception: an unprefixed traceback after "ERROR:root:..."
    assert logged.rank is None and logged.exc_type == "RuntimeError" and len(logged.frames) == 2


def test_gloo_timeout_traceback_and_agent_line_after_it() -> None:
    lines = _lines("torchrun_gloo_timeout.log")
    tb = parse_traceback(lines)
    assert tb is not None and tb.rank == 0
    assert tb.exc_type == "RuntimeError"
    assert tb.message.endswith("Timed out waiting 2000ms for recv operation to complete")  # one line, not the W1122 one
    assert tb.blame is not None and tb.blame.line == 17 and tb.blame.source.startswith("dist.all_reduce(t)")
    assert parse_watchdog(tb.message).kind == "gloo_timeout"


def test_faulthandler_dump() -> None:
    tbs = parse_tracebacks(_lines("torchrun_rank1_abort.log"))
    dump = tbs[0]
    assert (dump.exc_type, dump.message) == ("Fatal Python error", "Aborted")
    assert dump.frames[0].function == "<module>" and dump.frames[-1].function == "main"  # outermost first
    assert dump.blame is not None and dump.blame.function == "main"


def test_interleaved_ranks_are_separated() -> None:
    # two ranks printing at once, line by line (synthetic: shows the prefix-based separation)
    lines = [
        "[rank0]: Traceback (most recent call last):",
        "[rank1]: Traceback (most recent call last):",
        '[rank0]:   File "/home/u/train.py", line 10, in <module>',
        '[rank1]:   File "/home/u/train.py", line 12, in <module>',
        "[rank0]:     step()",
        "[rank1]:     load()",
        "[rank1]: FileNotFoundError: [Errno 2] No such file or directory: 'shard-1.bin'",
        "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered",
        "[rank0]: CUDA kernel errors might be asynchronously reported at some other API call.",
        "W0501 12:00:01.000000 9 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 5",
    ]
    tbs = {tb.rank: tb for tb in parse_tracebacks(lines)}
    assert tbs[1].exc_type == "FileNotFoundError" and tbs[1].frames[0].source == "load()"
    assert tbs[0].exc_type == "RuntimeError"
    assert tbs[0].message == (
        "CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call."
    )


def test_multiline_message_stops_at_the_next_log_record() -> None:
    # shape of a torch 2.1 NCCL failure as posted in hkproj/pytorch-transformer-distributed#1
    lines = [
        "Traceback (most recent call last):",
        '  File "/home/u/train.py", line 8, in <module>',
        "    dist.barrier()",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1333, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.6",
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
        "Last error:",
        "socketStartConnect: Connect to 192.168.7.3<40211> failed : No route to host",
        "[2024-03-18 17:38:50,208] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1)",
    ]
    tb = parse_traceback(lines)
    assert tb is not None and tb.exc_type == "torch.distributed.DistBackendError"
    assert tb.message.splitlines()[-1] == "socketStartConnect: Connect to 192.168.7.3<40211> failed : No route to host"
    assert tb.end == 7


def test_bodies_and_odd_shapes() -> None:
    bodies = [
        "Traceback (most recent call last):",
        '  File "/home/u/run.py", line 3',
        "    x = (",
        "        ^",
        "SyntaxError: '(' was never closed",
    ]
    tb = parse_traceback(bodies)
    assert tb and (tb.exc_type, tb.frames[0].function, tb.frames[0].source) == ("SyntaxError", None, "x = (")
    bare = parse_traceback(
        ["Traceback (most recent call last):", '  File "a.py", line 1, in <module>', "KeyboardInterrupt"]
    )
    assert bare and (bare.exc_type, bare.message) == ("KeyboardInterrupt", "")
    cut = parse_traceback(["Traceback (most recent call last):", '  File "a.py", line 1, in <module>'])
    assert cut and cut.exc_type == "" and len(cut.frames) == 1
    assert parse_traceback(["no traceback here", ""]) is None
    assert parse_traceback([]) is None


@pytest.mark.parametrize(
    ("path", "user"),
    [
        ("/home/u/project/train.py", True),
        ("/work/main/tests/data/lines/gen/rank1_raises.py", True),
        ("C:\\Users\\u\\proj\\train.py", True),
        ("<stdin>", True),
        ("/work/main/.venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", False),
        ("/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/engine.py", False),
        ("/opt/conda/lib/python3.10/multiprocessing/process.py", False),
        ("/usr/lib64/python3.9/threading.py", False),
        ("C:\\Python311\\Lib\\threading.py", False),
        ("<frozen runpy>", False),
        ("<string>", False),
        ("/opt/pytorch/pytorch/torch/nn/modules/module.py", False),
        ("/work/main/.venv/bin/torchrun", False),
        ("/home/u/lib/python_tools/helpers.py", True),
    ],
)
def test_is_user_path(path: str, user: bool) -> None:
    assert is_user_path(path) is user


# --- torchrun failure summary -------------------------------------------------------


# --- never raise ----------------------------------------------------------------------------

_SNIPPETS = st.sampled_from(
    [
        "Traceback (most recent call last):",
        '  File "/home/u/x.py", line 3, in f',
        "    f()",
        "    ^^^",
        "RuntimeError: x",
        "",
        "  ",
        "The above exception was the direct cause of the following exception:",
        "During handling of the above exception, another exception occurred:",
        "[rank0]: ",
        "[rank1]: Traceback (most recent call last):",
        "Current thread 0x00007f (most recent call first):",
        "Failures:",
        "Root Cause (first observed failure):",
        "[0]:",
        "  traceback : Traceback (most recent call last):",
        "  exitcode  : -6 (pid: 1)  (SIGABRT)",
        "  rank      : x (local_rank: y)",
        "=" * 60,
        "x FAILED",
        "WorkNCCL(SeqNum=",
        "NET/IB : Using [0]",
    ]
)
_LINE = st.one_of(st.text(max_size=200), _SNIPPETS, st.tuples(_SNIPPETS, st.text(max_size=30)).map("".join))



@settings(max_examples=300, deadline=None)
@given(st.lists(_LINE, max_size=40))
def test_parse_tracebacks_never_raises(lines: list[str]) -> None:
    for tb in parse_tracebacks(lines):
        assert 0 <= tb.start < tb.end <= len(lines)
        assert tb.chain and tb.chain[-1].exc_type == tb.exc_type
    for line in lines:
        is_user_path(line)


def test_a_traceback_that_lost_its_indentation_keeps_each_frames_source():
    """Copied from a rendered web page, a traceback's lines all start at the left: the line under a frame is still
    that frame's source unless it reads like the exception ("main()" is code; "StopIteration" is raised)."""
    flat = ['Traceback (most recent call last):', 'File "/work/train.py", line 52, in <module>', 'main()', '^^^^^^',
            'File "/work/train.py", line 40, in main', 'next(it)', 'StopIteration']
    tb = parse_traceback(flat)
    assert (tb.exc_type, tb.message) == ("StopIteration", "")
    assert [(f.function, f.source) for f in tb.frames] == [("<module>", "main()"), ("main", "next(it)")]
    # indented as Python prints it, a bare exception name right under a frame is the exception
    tb = parse_traceback(['Traceback (most recent call last):', '  File "/work/train.py", line 52, in prefetch',
                          'StopIteration'])
    assert (tb.exc_type, [f.source for f in tb.frames]) == ("StopIteration", [None])
    tb = parse_traceback(['Traceback (most recent call last):', 'File "/work/x.py", line 3, in f',
                          'torch.OutOfMemoryError: CUDA out of memory.'])
    assert (tb.exc_type, [f.source for f in tb.frames]) == ("torch.OutOfMemoryError", [None])
