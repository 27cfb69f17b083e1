"""Structured messages: watchdog timeouts, tracebacks, torchrun failure summaries, NCCL env and interfaces."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudoctor.engine.lines import parse_prefix
from gpudoctor.engine.structure import (
    NetInterface,
    is_user_path,
    is_virtual_or_loopback,
    parse_nccl_env,
    parse_nccl_net,
    parse_root_cause,
    parse_traceback,
    parse_tracebacks,
    parse_watchdog,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "lines"


def _lines(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8", errors="replace").splitlines()


def _body(line: str) -> str:
    return parse_prefix(line).body


def _posted(containing: str) -> str:
    return next(line for line in _lines("posted_formats.txt") if containing in line and not line.startswith("#"))


# --- watchdog ------------------------------------------------------------------


def test_watchdog_example_from_the_brief() -> None:
    w = parse_watchdog(
        "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=57, OpType=ALLREDUCE, "
        "NumelIn=1048576, NumelOut=1048576, Timeout(ms)=1800000) ran for 1800093 milliseconds before timing out."
    )
    assert w is not None
    assert (w.kind, w.backend, w.rank, w.seq, w.op_type) == ("nccl_timeout", "nccl", 3, 57, "ALLREDUCE")
    assert (w.numel_in, w.numel_out, w.timeout_ms, w.ran_ms) == (1048576, 1048576, 1800000, 1800093)


@pytest.mark.parametrize(
    ("containing", "expected"),
    [
        (
            "SeqNum=2211",
            {"kind": "nccl_timeout", "rank": 0, "seq": 2211, "numel_in": 271581184, "ran_ms": 600071},
        ),
        (
            "at work: 2211",
            {"kind": "nccl_work_status", "rank": 0, "pg_id": 1, "seq": 2211, "last_enqueued": 2213,
             "last_completed": 2210},
        ),
        (
            "at work: 913",
            {"kind": "nccl_work_status", "rank": 1, "pg_id": 0, "pg_name": "default_pg", "last_enqueued": 916},
        ),
        (
            "Timeout at NCCL work: 7305",
            {"kind": "nccl_work_status", "rank": 4, "pg_id": 3, "seq": 7305, "last_completed": 7304},
        ),
        (
            "work sequence id: 1184302",
            {"kind": "nccl_work_status", "rank": 118, "seq": 1184302, "last_enqueued": 1184417,
             "last_completed": 1184301},
        ),
        (  # torch 1.12: no Numel fields
            "SeqNum=351227",
            {"kind": "nccl_timeout", "rank": 1, "op_type": "ALLREDUCE", "numel_in": None, "timeout_ms": 1800000,
             "ran_ms": 1802940},
        ),
        (
            "_REDUCE_SCATTER_BASE",
            {"op_type": "_REDUCE_SCATTER_BASE", "numel_in": 402653184, "numel_out": 50331648},
        ),
        ("Heartbeat monitor timed out", {"kind": "nccl_watchdog_stuck", "rank": 1, "timeout_ms": None}),
        ("got stuck for 480 seconds", {"kind": "nccl_watchdog_stuck", "rank": 7, "timeout_ms": 480_000}),
        (
            "Rank 1 failed to pass monitoredBarrier",
            {"kind": "monitored_barrier", "backend": "gloo", "rank": 0, "missing_ranks": (1,), "timeout_ms": 2000},
        ),
        (
            "Timed out waiting 2000ms",
            {"kind": "gloo_timeout", "backend": "gloo", "op_type": "recv", "timeout_ms": 2000, "rank": None},
        ),
    ],
)
def test_watchdog_posted_formats(containing: str, expected: dict) -> None:
    w = parse_watchdog(_body(_posted(containing)))
    assert w is not None
    for name, value in expected.items():
        assert getattr(w, name) == value, name


def test_watchdog_in_our_gloo_run() -> None:
    found = [parse_watchdog(_body(line)) for line in _lines("torchrun_gloo_timeout.log")]
    found = [w for w in found if w]
    assert [(w.kind, w.timeout_ms, w.op_type) for w in found] == [("gloo_timeout", 2000, "recv")]
    detail = [w for w in (parse_watchdog(_body(line)) for line in _lines("torchrun_gloo_detail.log")) if w]
    assert detail and all(w.kind == "monitored_barrier" and w.missing_ranks == (1,) for w in detail)


def test_watchdog_variants() -> None:
    unknown = parse_watchdog(
        "[PG 3 Rank 5] Process group watchdog thread terminated with exception: [Rank 5] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=1, OpType=COALESCED, NumelIn=18446744073709551615, "
        "NumelOut=18446744073709551615, Timeout(ms)=1800000) ran for 1800014 milliseconds before timing out."
    )
    assert unknown and (unknown.rank, unknown.pg_id, unknown.numel_in, unknown.op_type) == (5, 3, None, "COALESCED")
    failed = parse_watchdog(
        "Collective WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1000000) raised the "
        "following async exception: NCCL error: unhandled system error"
    )
    assert failed and (failed.kind, failed.seq, failed.ran_ms) == ("nccl_async_error", 2, None)
    old = parse_watchdog(
        "what():  [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(OpType=BROADCAST, "
        "Timeout(ms)=1800000) ran for 1802691 milliseconds before timing out."
    )
    assert old and (old.seq, old.op_type, old.ran_ms) == (None, "BROADCAST", 1802691)
    started = parse_watchdog("[PG 0 Rank 2] Timeout at NCCL work: 9, last enqueued NCCL work: 11, "
                             "last started NCCL work: 10, last completed NCCL work: 8.")
    assert started and (started.last_started, started.last_enqueued, started.last_completed) == (10, 11, 8)
    barrier = parse_watchdog("[Rank 0]: Ranks 1, 3, 5 failed to pass monitoredBarrier in 30000 ms")
    assert barrier and barrier.missing_ranks == (1, 3, 5)
    never = parse_watchdog(
        "[PG 0 Rank 1] Timeout at NCCL work: 1, last enqueued NCCL work: 1, last completed NCCL work: -1."
    )
    assert never and never.last_completed == -1


@pytest.mark.parametrize(
    "body",
    [
        "",
        "Watchdog",
        "loss=2.3 step=10",
        "Some NCCL operations have failed or timed out.",
        "WorkNCCL",
        "frame #3: c10d::ProcessGroupNCCL::WorkNCCL::WorkNCCL(std::string const&, c10::Device&, int) + 0x1f",
    ],
)
def test_not_a_watchdog(body: str) -> None:
    assert parse_watchdog(body) is None


# --- tracebacks ------------------------------------------------------------------


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


def test_root_cause_with_embedded_traceback() -> None:
    entries = parse_root_cause(_lines("torchrun_rank1_raises.log"))
    assert [(e.is_root, e.index, e.rank) for e in entries] == [(False, 1, 0), (True, 0, 1)]
    other, root = entries
    assert (other.exitcode, other.signal, other.error_file) == (-15, "SIGTERM", None)
    assert other.traceback_text.startswith("Signal 15 (SIGTERM) received by PID")
    assert root.script == "tests/data/lines/gen/rank1_raises.py"
    assert (root.host, root.local_rank, root.exitcode, root.signal) == ("localhost", 1, 1, None)
    assert root.pid is not None and root.error_file.endswith("/attempt_0/1/error.json")
    assert root.epoch_s is not None and root.time.startswith("20")
    assert root.traceback is not None
    assert (root.traceback.exc_type, root.traceback.root.exc_type) == ("ValueError", "RuntimeError")
    assert "    load_batch(7)" in root.traceback_text  # de-indented by the summary's two spaces only


@pytest.mark.parametrize(
    ("name", "root"),
    [
        ("torchrun_rank1_abort.log", {"rank": 1, "exitcode": -6, "signal": "SIGABRT", "traceback": None}),
        ("torchrun_rank1_exit.log", {"rank": 1, "exitcode": 3, "signal": None}),
        ("torchrun_gloo_timeout.log", {"rank": 0, "exitcode": 1, "signal": None}),
        ("torchrun_gloo_detail.log", {"rank": 0, "exitcode": 1}),
        ("torchrun_gloo_peer_exit.log", {"rank": 0, "exitcode": 1}),
    ],
)
def test_root_cause_from_our_runs(name: str, root: dict) -> None:
    entries = parse_root_cause(_lines(name))
    roots = [e for e in entries if e.is_root]
    assert len(roots) == 1
    for field, value in root.items():
        assert getattr(roots[0], field) == value, field
    if name == "torchrun_rank1_exit.log":
        assert roots[0].traceback_text.startswith("To enable traceback see: https://pytorch.org/docs/stable/elastic")


def test_root_cause_both_raise_has_context_chain() -> None:
    entries = parse_root_cause(_lines("torchrun_both_raise.log"))
    other = next(e for e in entries if not e.is_root)
    assert other.traceback is not None
    assert [(e.exc_type, e.link) for e in other.traceback.chain] == [("IndexError", None), ("KeyError", "context")]


def test_root_cause_older_formats() -> None:
    # torch 2.0-2.6: no signal name after the pid (shape from pytorch/pytorch#121209), several failures
    newer = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2024-03-05_07:01:51
  host      : node-a.internal
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 69812)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 69812
[2]:
  time      : 2024-03-05_07:01:51
  host      : node-a.internal
  rank      : 2 (local_rank: 2)
  exitcode  : -9 (pid: 69813)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-03-05_07:01:50
  host      : node-a.internal
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 69811)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================""".splitlines()
    entries = parse_root_cause(newer)
    assert [(e.rank, e.signal) for e in entries] == [(1, "SIGABRT"), (2, "SIGKILL"), (0, None)]
    assert [e.is_root for e in entries] == [False, False, True]
    assert entries[0].epoch_s == pytest.approx(1709622111.0)
    # torch 1.9-1.10 template: "Root Cause:" first, "msg:" instead of "traceback :"
    old = """*****************************************
              train.py FAILED
=========================================
Root Cause:
[0]:
  time: 2021-09-07_10:23:45
  rank: 0 (local_rank: 0)
  exitcode: 1 (pid: 12345)
  error_file: <N/A>
  msg: "Process failed with exitcode 1"
=========================================
Other Failures:
  <NO_OTHER_FAILURES>
*****************************************""".splitlines()
    [entry] = parse_root_cause(old)
    assert (entry.is_root, entry.rank, entry.exitcode, entry.pid, entry.host) == (True, 0, 1, 12345, None)
    assert entry.traceback_text == "Process failed with exitcode 1"


def test_root_cause_under_slurm_labels() -> None:
    lines = ["0: " + line for line in _lines("torchrun_rank1_exit.log")]
    roots = [e for e in parse_root_cause(lines) if e.is_root]
    assert roots and roots[0].exitcode == 3
    raised = ["3: " + line for line in _lines("torchrun_rank1_raises.log")]
    root = next(e for e in parse_root_cause(raised) if e.is_root)
    assert root.traceback is not None and root.traceback.exc_type == "ValueError"
    assert "    load_batch(7)" in root.traceback_text


def test_root_cause_traceback_text_is_not_prefix_stripped() -> None:
    lines = [
        "Root Cause (first observed failure):",
        "[0]:",
        "  rank      : 0 (local_rank: 0)",
        "  traceback : Traceback (most recent call last):",
        '    File "/home/u/train.py", line 5, in <module>',
        "  ValueError: bad timestamp",
        "  2024-05-01 12:00:01 INFO this line is part of the message",
        "=" * 60,
    ]
    [entry] = parse_root_cause(lines)
    assert entry.traceback_text.splitlines()[-1] == "2024-05-01 12:00:01 INFO this line is part of the message"


def test_no_root_cause() -> None:
    assert parse_root_cause(["[0]:", "  time      : x", "hello"]) == []
    assert parse_root_cause([]) == []


# --- NCCL / torch environment ---------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "env"),
    [
        ("NCCL_SOCKET_IFNAME set by environment to eth0", {"NCCL_SOCKET_IFNAME": "eth0"}),
        ("NCCL_IB_DISABLE set by environment to 1.", {"NCCL_IB_DISABLE": "1"}),
        ("NCCL_SOCKET_IFNAME set to eth2", {"NCCL_SOCKET_IFNAME": "eth2"}),
        ("export NCCL_IB_DISABLE=1", {"NCCL_IB_DISABLE": "1"}),
        ("NCCL_DEBUG=INFO NCCL_P2P_DISABLE=1 torchrun --nproc-per-node 8 train.py",
         {"NCCL_DEBUG": "INFO", "NCCL_P2P_DISABLE": "1"}),
        ("mpirun -x NCCL_DEBUG=INFO -x LD_LIBRARY_PATH -x NCCL_SOCKET_IFNAME=^docker0,lo python x.py",
         {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "^docker0,lo"}),
        ("launching with NCCL_DEBUG=WARN, NCCL_IB_HCA=mlx5_0,mlx5_1 now",
         {"NCCL_DEBUG": "WARN", "NCCL_IB_HCA": "mlx5_0,mlx5_1"}),
        ("export TORCH_NCCL_ASYNC_ERROR_HANDLING=1 TORCH_DISTRIBUTED_DEBUG=DETAIL",
         {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"}),
        ('export NCCL_SOCKET_IFNAME="eth0"', {"NCCL_SOCKET_IFNAME": "eth0"}),
        ("os.environ['NCCL_BLOCKING_WAIT'] = '1'", {"NCCL_BLOCKING_WAIT": "1"}),
        ("env: {'MASTER_ADDR': '10.0.0.1', 'MASTER_PORT': '29500', 'LOCAL_RANK': '3'}",
         {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "LOCAL_RANK": "3"}),
        ("[PG ID 0 PG GUID 0 Rank 0] ProcessGroupNCCL environments: NCCL version: 2.21.5, "
         "TORCH_NCCL_ASYNC_ERROR_HANDLING: 3, TORCH_NCCL_DUMP_ON_TIMEOUT: 0, TORCH_DISTRIBUTED_DEBUG: OFF",
         {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0", "TORCH_DISTRIBUTED_DEBUG": "OFF"}),
        ("LOCAL_RANK=3 RANK=11 WORLD_SIZE=16", {"LOCAL_RANK": "3", "RANK": "11", "WORLD_SIZE": "16"}),
        ("Warning: Environment variable NCCL_ASYNC_ERROR_HANDLING is deprecated", {}),
        ("MY_RANK=3 XNCCL_DEBUG=INFO $NCCL_DEBUG=x", {}),
        ("nothing to see", {}),
    ],
)
def test_parse_nccl_env(body: str, env: dict) -> None:
    assert parse_nccl_env(body) == env


def test_env_from_posted_nccl_lines() -> None:
    env: dict[str, str] = {}
    for line in _lines("posted_formats.txt"):
        env.update(parse_nccl_env(_body(line)))
    assert env["NCCL_IB_DISABLE"] == "1"
    assert env["NCCL_SOCKET_IFNAME"] in ("lo", "eth2")


# --- NCCL network choice ------------------------------------------------------------------


def test_parse_nccl_net_formats() -> None:
    sock = parse_nccl_net("NET/Socket : Using [0]docker0:172.17.0.1<0>")
    assert sock and (sock.role, sock.transport, sock.pairs) == ("net", "Socket", (("docker0", "172.17.0.1"),))
    boot = parse_nccl_net("Bootstrap : Using eth0:10.1.1.1<0>")
    assert boot and (boot.role, boot.pairs) == ("bootstrap", (("eth0", "10.1.1.1"),))
    ib = parse_nccl_net("NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:192.168.1.35<0>")
    assert ib and ib.transport == "IB"
    assert ib.interfaces == (NetInterface("mlx5_0", None, 0, 1, "IB"), NetInterface("mlx5_1", None, 1, 1, "IB"))
    assert ib.oob == NetInterface("ib0", "192.168.1.35")
    none = parse_nccl_net("NET/IB : No device found.")
    assert none and (none.transport, none.interfaces) == ("IB", ())
    chosen = parse_nccl_net("Using network Socket")
    assert chosen and (chosen.role, chosen.transport) == ("selected", "Socket")
    assert parse_nccl_net("NET/Plugin : No plugin found (libnccl-net.so), using internal implementation") is None
    assert parse_nccl_net("NET/Socket : 2 interfaces found") is None
    assert parse_nccl_net("hello") is None


def test_parse_nccl_net_posted_lines() -> None:
    nets = [n for n in (parse_nccl_net(_body(line)) for line in _lines("posted_formats.txt")) if n]
    names = {i.name for n in nets for i in n.interfaces}
    assert {"lo", "enP1p1s0f0", "enP1p1s0f1", "virbr0", "veth51c2a90", "mlx4_0", "mlx5_0", "br0", "flannel.1",
            "docker0"} <= names
    veth = next(i for n in nets for i in n.interfaces if i.name == "veth51c2a90")
    assert veth.address == "fe80::50c1:2eff:fe33:9a01%veth51c2a90"
    sideband = next(n for n in nets if n.oob and n.oob.name == "br0")
    assert sideband.transport == "IB" and sideband.oob.address is None
    roce = next(n for n in nets if any(i.link == "RoCE" for i in n.interfaces))
    assert roce.oob == NetInterface("enp7s0", "10.12.7.40")


@pytest.mark.parametrize(
    ("name", "virtual"),
    [
        ("lo", True), ("lo0", True), ("docker0", True), ("virbr0", True), ("veth51c2a90", True),
        ("br-3f2a9c1d0e7b", True), ("cni0", True), ("flannel.1", True), ("cali12ab34cd", True), ("tun0", True),
        ("tailscale0", True), ("wg0", True), ("vxlan.calico", True), ("cilium_host", True),
        ("eth0", False), ("ens5", False), ("enp7s0", False), ("em1", False), ("ib0", False), ("bond0", False),
        ("br0", False), ("mlx5_0", False), ("eth0:1", False), ("loopy", False), ("hsn0", False),
    ],
)
def test_is_virtual_or_loopback(name: str, virtual: bool) -> None:
    assert is_virtual_or_loopback(name) is virtual


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
def test_window_parsers_never_raise(lines: list[str]) -> None:
    for tb in parse_tracebacks(lines):
        assert 0 <= tb.start < tb.end <= len(lines)
        assert tb.chain and tb.chain[-1].exc_type == tb.exc_type
    for entry in parse_root_cause(lines):
        assert 0 <= entry.line < len(lines)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), _LINE, st.lists(_LINE, max_size=5).map(" ".join)))
def test_line_parsers_never_raise(body: str) -> None:
    parse_watchdog(body)
    env = parse_nccl_env(body)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
    parse_nccl_net(body)
    is_virtual_or_loopback(body)
    is_user_path(body)
