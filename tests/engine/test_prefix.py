"""Line prefixes: real launcher/NCCL/logger/scheduler formats, cleaning, and properties over arbitrary text."""
from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpudoctor.engine.display import clean_for_display, strip_ansi, visible_text
from gpudoctor.engine.prefix import MAX_PREFIXES, LinePrefix, parse_prefix
from gpudoctor.engine.prefix_rules import STRONG, WEAK
from gpudoctor.engine.timefmt import iso_to_epoch
from gpudoctor.kb.record import fields, replace

DATA = Path(__file__).resolve().parent.parent / "data" / "lines"


def _lines(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8", errors="replace").splitlines()


def _posted() -> list[str]:
    return [line for line in _lines("posted_formats.txt") if not line.startswith("#")]


# (line, expected body, expected fields): formats from posted_formats.txt and our own torchrun runs
CASES = [
    (
        "node-1:12345:12399 [3] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>",
        "NET/Socket : Using [0]eth0:10.0.0.2<0>",
        {"host": "node-1", "pid": 12345, "tid": 12399, "device": 3, "level": "INFO", "kinds": ("nccl",)},
    ),
    (
        "hpc-31-01:39980:40102 [0] bootstrap.cc:131 NCCL WARN Bootstrap Root : rank 1 of 8 ranks has checked in",
        "Bootstrap Root : rank 1 of 8 ranks has checked in",
        {"host": "hpc-31-01", "level": "WARN", "source": "bootstrap.cc:131"},
    ),
    (  # NCCL 2.2 printed no "NCCL" word
        "nm-203-11:25510:25790 [0] INFO NET : Using interface flannel.1:172.30.44.0<0>",
        "NET : Using interface flannel.1:172.30.44.0<0>",
        {"host": "nm-203-11", "device": 0, "level": "INFO"},
    ),
    ("[rank3]: Traceback (most recent call last):", "Traceback (most recent call last):", {"rank": 3}),
    (  # the excepthook adds "[rankN]: "; the frame's own indentation must survive
        '[default0]:[rank0]:   File "/x.py", line 3, in <module>',
        '  File "/x.py", line 3, in <module>',
        {"rank": 0, "local_rank": 0, "role": "default", "kinds": ("tee", "rank")},
    ),
    (
        "[trainer3]:tw0113:2240:2240 [3] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth2",
        "NCCL_SOCKET_IFNAME set by environment to eth2",
        {"local_rank": 3, "role": "trainer", "host": "tw0113", "device": 3},
    ),
    (
        "[2024-05-01 12:00:01,123] [INFO] [launch.py:145:main] WORLD INFO DICT: {'localhost': [0, 1]}",
        "WORLD INFO DICT: {'localhost': [0, 1]}",
        {
            "level": "INFO",
            "timestamp": "2024-05-01 12:00:01,123",
            "epoch_s": 1714564801.123,
            "day_s": 43201.123,
            "source": "launch.py:145:main",
        },
    ),
    ("2024-05-01T12:00:01.123Z something happened", "something happened", {"epoch_s": 1714564801.123}),
    ("2024-05-01T14:00:01+02:00 shifted", "shifted", {"epoch_s": 1714564801.0}),
    (
        "I0501 12:00:01.123456 12345 ProcessGroupNCCL.cpp:1234] hello",
        "hello",
        {"level": "INFO", "tid": 12345, "day_s": 43201.123456, "source": "ProcessGroupNCCL.cpp:1234", "epoch_s": None},
    ),
    (  # torch's Python logs put the pid where glog puts the thread id
        "W1122 01:45:32.618000 6566 torch/distributed/run.py:874] Setting OMP_NUM_THREADS",
        "Setting OMP_NUM_THREADS",
        {"level": "WARN", "pid": 6566, "tid": None, "source": "torch/distributed/run.py:874"},
    ),
    ("[E501 12:00:01.123 ProcessGroupNCCL.cpp:12] x", "x", {"level": "ERROR", "day_s": 43201.123}),
    (  # c10 leaves the month unpadded
        "[rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught",
        "[Rank 1] Watchdog caught",
        {"rank": 1, "level": "ERROR", "timestamp": "626 06:24:44.903881913", "source": "ProcessGroupNCCL.cpp:616"},
    ),
    (
        "[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught",
        "[Rank 1] Watchdog caught",
        {"level": "ERROR", "timestamp": None, "source": "ProcessGroupNCCL.cpp:475"},
    ),
    (
        "[rank1]:[F ProcessGroupNCCL.cpp:1169] [PG 0 Rank 1] stuck",
        "[PG 0 Rank 1] stuck",
        {"rank": 1, "level": "FATAL"},
    ),
    (
        "INFO:torch.distributed.elastic.agent.server.api:[default] Starting worker group",
        "[default] Starting worker group",
        {"level": "INFO", "source": "torch.distributed.elastic.agent.server.api"},
    ),
    ("WARNING:__main__:", "", {"level": "WARN", "source": "__main__"}),
    (
        "[INFO|trainer.py:2134] 2024-09-17 23:35:34,372 >> ***** Running training *****",
        "***** Running training *****",
        {"level": "INFO", "source": "trainer.py:2134", "timestamp": "2024-09-17 23:35:34,372"},
    ),
    (
        "[1,0]<stderr>:gpu6:1407:1595 [0] NCCL INFO init.cu:915 -> 2",
        "init.cu:915 -> 2",
        {"rank": 0, "stream": "stderr", "host": "gpu6", "kinds": ("mpi", "nccl")},
    ),
    (
        "0: [rank0]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog",
        "[Rank 0] Watchdog",
        {"task": 0, "rank": 0, "level": "ERROR", "kinds": ("slurm", "rank", "glog")},
    ),
    (" 12: hello", "hello", {"task": 12}),
    (
        "[2023-10-20 10:24:10,690] torch.distributed.run: [WARNING] ",
        "",
        {"level": "WARN", "source": "torch.distributed.run"},
    ),
    (
        "2021-08-13 10:46:03 - INFO - torch.distributed.elastic - msg here",
        "msg here",
        {"level": "INFO", "source": "torch.distributed.elastic"},
    ),
    (
        "ray/0 (CommandActor pid=494406) INFO:torch.distributed.elastic.agent.server.api:[] Starting",
        "[] Starting",
        {"pid": 494406, "level": "INFO", "kinds": ("replica", "actor", "pylog")},
    ),
    (
        "(RayTrainWorker pid=2273, ip=172.24.9.80) [rank7]:[W Utils.hpp:108] Warning: x",
        "Warning: x",
        {"pid": 2273, "host": "172.24.9.80", "rank": 7, "level": "WARN"},
    ),
    (
        "(VllmWorker rank=2 pid=123) INFO 07-12 10:26:06 [__init__.py:244] Automatically detected",
        "Automatically detected",
        {"rank": 2, "pid": 123, "level": "INFO", "day_s": 37566.0},
    ),
    (
        "May  1 12:00:01 node-1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234",
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234",
        {"host": "node-1", "source": "kernel", "day_s": 43201.0},
    ),
    (
        "2024-05-01T12:00:01.123+02:00 node-1 kernel: NVRM: Xid 79",
        "NVRM: Xid 79",
        {"host": "node-1", "epoch_s": 1714557601.123},
    ),
    ("[Wed May  1 12:00:01 2024] NVRM: Xid 79", "NVRM: Xid 79", {"epoch_s": 1714564801.0}),
    ("[ 1234.567890] NVRM: Xid 79", "NVRM: Xid 79", {"timestamp": "[ 1234.567890]", "day_s": None}),
    (
        "2024-05-01T12:00:01.123456789Z stderr F [rank1]: RuntimeError: boom",
        "RuntimeError: boom",
        {"stream": "stderr", "rank": 1, "kinds": ("iso_cri", "rank")},
    ),
    (
        "[INFO] 2022-08-24 20:47:06,809 api: [default] Starting worker group",
        "[default] Starting worker group",
        {"level": "INFO", "source": "api"},
    ),
    (
        "2024-05-01 12:00:01.123 | INFO     | __main__:main:42 - step 10",
        "step 10",
        {"level": "INFO", "source": "__main__:main:42"},
    ),
    (  # TensorFlow/absl after an ISO timestamp, under Open MPI
        "[1,1]<stderr>:2022-08-02 09:14:51.120338: I tensorflow/stream_executor/cuda/cuda_dnn.cc:384] Loaded",
        "Loaded",
        {"rank": 1, "level": "INFO", "source": "tensorflow/stream_executor/cuda/cuda_dnn.cc:384"},
    ),
    (  # a collector's minute-resolution stamp before a c10 line: the ISO one has the date, so it wins
        " 2025-02-19 19:08 [rank12]:[E219 11:08:40.772310045 ProcessGroupNCCL.cpp:1844] x",
        "x",
        {"rank": 12, "timestamp": "2025-02-19 19:08", "kinds": ("indent", "iso", "rank", "glog")},
    ),
    (  # a tqdm bar whose carriage return was lost in the paste, run into the next rank-tagged record
        "Train:  20%|█▉        | 375/1881 [3:40:16<14:52:25, 35.55s/it][rank3]:[E918 19:29:24.436955737 "
        "ProcessGroupNCCL.cpp:689] [Rank 3] Watchdog caught collective operation timeout",
        "[Rank 3] Watchdog caught collective operation timeout",
        {"rank": 3, "kinds": ("progress", "rank", "glog")},
    ),
    (
        " 45%|████▌     | 9/20 [00:03<00:04,  2.50it/s][rank0]: RuntimeError: x",
        "RuntimeError: x",
        {"rank": 0, "kinds": ("progress", "rank")},
    ),
    # QA24 R7: `python train.py 2>&1 | ts` (moreutils' default format), a bare time, Ray's plain-task prefix
    (
        "Nov 29 12:00:01 [rank1]: ValueError: bad batch in rank 1",
        "ValueError: bad batch in rank 1",
        {"rank": 1, "day_s": 43201.0, "kinds": ("month_time", "rank")},
    ),
    (
        "Nov  9 12:00:01.250 INFO starting",
        "starting",
        {"day_s": 43201.25, "level": "INFO", "kinds": ("month_time", "level")},
    ),
    ("12:00:01 [rank0]: Traceback (most recent call last):", "Traceback (most recent call last):",
     {"rank": 0, "day_s": 43201.0, "kinds": ("clock", "rank")}),
    ("[07:15:30] [default1]:training finished", "training finished",
     {"local_rank": 1, "day_s": 26130.0, "kinds": ("clock", "tee")}),
    ("(pid=1234) [rank1]: ValueError: x", "ValueError: x", {"pid": 1234, "rank": 1, "kinds": ("pid_only", "rank")}),
    ("(pid=77, ip=10.0.0.3) hello", "hello", {"pid": 77, "host": "10.0.0.3", "kinds": ("pid_only",)}),
    # a syslog line keeps its host and program: the `ts` rule steps aside for it
    ("Nov 29 12:00:01 gpu-node1 kernel: NVRM: Xid 79", "NVRM: Xid 79", {"host": "gpu-node1", "kinds": ("syslog",)}),
]


@pytest.mark.parametrize(("line", "body", "fields"), CASES, ids=[c[0][:40] for c in CASES])
def test_known_prefixes(line: str, body: str, fields: dict) -> None:
    p = parse_prefix(line)
    assert p.body == body
    for name, value in fields.items():
        got = getattr(p, name)
        if isinstance(value, float):
            assert got == pytest.approx(value, abs=1e-6), name
        else:
            assert got == value, name


@pytest.mark.parametrize(
    "line",
    [
        "Traceback (most recent call last):",
        '  File "/x.py", line 3, in <module>',
        "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error",
        "[0]:",  # a ChildFailedError entry header is not a rank prefix
        "  traceback : Signal 6 (SIGABRT) received by PID 7142",
        "ERROR: Could not find a version that satisfies the requirement",
        "Error: something",
        "Epoch 1: loss 2.3",
        "Epoch 1:  20%|██ | 2/10 [00:01<00:04] loss 3",  # a bar with no record after it is the message
        "10:30 is when it broke",
        "12:00:01",  # a time alone is the message
        "(pid is 12) not Ray",
        "[Rank 0] Watchdog caught collective operation timeout",  # c10's own tag stays in the body
        "[default] Starting worker group",
        "some message: [INFO] not a logger prefix",
        "============================================================",
        "",
    ],
)
def test_text_that_is_not_a_prefix_is_left_alone(line: str) -> None:
    p = parse_prefix(line)
    assert p.body == line
    assert p.kinds == ()
    assert p.offset == 0


def test_every_posted_format_has_a_prefix() -> None:
    lines = _posted()
    assert len(lines) > 40
    for line in lines:
        p = parse_prefix(line)
        assert p.kinds, line
        assert p.body != line


@pytest.mark.parametrize("name", ["torchrun_gloo_timeout.log", "torchrun_gloo_timeout_tee.log"])
def test_real_torchrun_ranks(name: str) -> None:
    lines = _lines(name)
    ranked = [parse_prefix(line) for line in lines if "[rank0]:" in line]
    assert ranked and all(p.rank == 0 for p in ranked)
    if "tee" in name:
        tee = [parse_prefix(line) for line in lines if line.startswith("[default1]:")]
        assert tee and all(p.local_rank == 1 and p.role == "default" for p in tee)
    agent = [parse_prefix(line) for line in lines if line.startswith("W1122")]
    assert agent and all(p.level == "WARN" and p.source.startswith("torch/distributed/") for p in agent)
    assert {p.pid for p in agent} == {agent[0].pid}  # the torchrun agent's own pid


def test_detail_log_c10_lines() -> None:
    barrier = [parse_prefix(line) for line in _lines("torchrun_gloo_detail.log") if "monitoredBarrier in" in line]
    c10 = [p for p in barrier if "glog" in p.kinds]
    assert c10 and all(p.rank == 0 and p.level == "ERROR" for p in c10)
    assert all(p.body.startswith("[Rank 0]: Ranks 1 failed") or p.body.startswith("[Rank 0]: Rank 1") for p in c10)


def test_ansi_colour_codes_are_removed() -> None:
    p = parse_prefix("\x1b[36m[default1]:\x1b[0m\x1b[31m[rank1]: RuntimeError: x\x1b[0m")
    assert (p.body, p.rank, p.local_rank, p.offset) == ("RuntimeError: x", 1, 1, None)


def test_crlf_and_progress_bar_carriage_returns() -> None:
    p = parse_prefix("[rank0]: RuntimeError: x\r\n")
    assert p.body == "RuntimeError: x"
    assert p.offset == len("[rank0]: ")
    bar = "Epoch 0:  6%|##   | 32/500 [00:43<10:39]\r[E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught\n"
    q = parse_prefix(bar)
    assert q.body == "[Rank 0] Watchdog caught"
    assert bar[q.offset : q.offset + len(q.body)] == q.body


def test_stacked_timestamps_keep_the_most_informative() -> None:
    p = parse_prefix("2024-05-01T12:00:01Z stderr F W0501 12:00:01.123456 77 train.py:9] msg")
    assert p.epoch_s == pytest.approx(1714564801.0)  # the glog stamp is finer but has no year
    assert (p.level, p.pid, p.body) == ("WARN", 77, "msg")


def test_invalid_clock_values_keep_the_text_but_no_time() -> None:
    p = parse_prefix("2024-13-45 99:99:99 hello")
    assert p.timestamp == "2024-13-45 99:99:99"
    assert p.epoch_s is None and p.day_s is None
    assert p.body == "hello"


def test_iso_to_epoch() -> None:
    assert iso_to_epoch("2026-11-22_01:45:43") == pytest.approx(1795311943.0)
    assert iso_to_epoch("1970-01-01T00:00:00Z") == 0.0
    assert iso_to_epoch("2000-02-29 00:00:00") == pytest.approx(951782400.0)
    assert iso_to_epoch("not a time") is None


def test_clean_for_display() -> None:
    assert clean_for_display("\x1b[1;31mred\x1b[0m\tok\x07\x00\u202eevil\r\n") == "red\tok\\x07\\x00\\u202eevil"
    assert clean_for_display("a\rb") == "a\\rb"
    assert clean_for_display("plain") == "plain"


def test_strip_ansi_leaves_no_escape() -> None:
    assert strip_ansi("\x1b\x1b[0mA") == "A"  # removal must not splice a new sequence
    assert strip_ansi("\x1b]0;title\x07text") == "text"
    assert strip_ansi("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\") == "link"


def test_pathological_stacks_stop_at_the_cap() -> None:
    p = parse_prefix("[rank0]:" * 100_000 + "x")
    assert len(p.kinds) == MAX_PREFIXES
    assert p.rank == 0


def test_slurm_label_only_on_the_outside() -> None:
    assert parse_prefix("[default0]:100: loss 2.3").body == "100: loss 2.3"
    assert parse_prefix("[default0]:100: loss 2.3").task is None
    p = parse_prefix("2024-05-01T12:00:00Z 3: [rank0]: x")
    assert (p.task, p.rank, p.body) == (3, 0, "x")
    assert parse_prefix("0: 1: x").body == "1: x"


def test_result_is_frozen_and_comparable() -> None:
    p = parse_prefix("[rank2]: x")
    with pytest.raises(AttributeError):
        p.rank = 3  # type: ignore[misc]
    assert p == parse_prefix("[rank2]: x")
    assert p == LinePrefix(body="x", offset=9, rank=2, kinds=("rank",))
    assert hash(p) == hash(parse_prefix("[rank2]: x"))
    # parse_prefix builds instances without __init__ (see prefix._make): the usual tools still work
    values = {name: getattr(p, name) for name in fields(p)}
    assert values["level"] is None and values["rank"] == 2
    assert replace(p, rank=5).rank == 5 and replace(p, rank=5).body == "x"
    assert pickle.loads(pickle.dumps(p)) == p
    assert copy.copy(p) == p
    assert repr(parse_prefix("x")) == repr(LinePrefix(body="x", offset=0))


# --- properties ------------------------------------------------------------------

# Characters that prefixes are made of, so random text often looks almost like one.
_NEAR = st.sampled_from(
    list("[]:|<>()-_./,= \t\r\n\x1b0123456789EIWFrankdefaultNCCLINFOWARN")
    + ["[rank", "]:", "NCCL INFO ", "[default", "INFO:", " - ", "2024-05-01 ", "12:00:01", ",123", "\x1b[31m", "\r\n"]
)
_TEXT = st.one_of(st.text(), st.lists(_NEAR, max_size=40).map("".join))
_PREFIXES = st.sampled_from(
    [
        "[rank1]:",
        "[default0]:",
        "[1,3]<stderr>:",
        "0: ",
        "node-1:12:34 [2] NCCL INFO ",
        "W0501 12:00:01.123456 12 file.py:3] ",
        "[E501 12:00:01.123 ProcessGroupNCCL.cpp:12] ",
        "[2024-05-01 12:00:01,123] ",
        "[INFO] ",
        "2024-05-01T12:00:01Z ",
        "INFO:root:",
        "\x1b[32m",
        "  ",
    ]
)


@settings(max_examples=400, deadline=None)
@given(_TEXT)
def test_never_raises_and_body_is_a_suffix(line: str) -> None:
    p = parse_prefix(line)
    assert visible_text(line).endswith(p.body)
    if p.offset is not None:
        assert line[p.offset : p.offset + len(p.body)] == p.body
    clean_for_display(line)


@settings(max_examples=400, deadline=None)
@given(st.lists(_PREFIXES, max_size=6).map("".join), _TEXT)
@example("[rank1]:", "  >0")  # an indented quote mark behind a rank prefix (found by Hypothesis)
@example("[rank1]:", "0.: 0")  # a pdsh-like host label behind a rank prefix (found by Hypothesis)
def test_stripping_is_idempotent(prefixes: str, tail: str) -> None:
    p = parse_prefix(prefixes + tail)
    assert visible_text(prefixes + tail).endswith(p.body)
    if len(p.kinds) < MAX_PREFIXES:
        again = parse_prefix(p.body)
        # the exceptions: the columns only read on the outside of a line (its indentation included): srun's
        # "N: " label, a reply's "> " quote marks, pdsh's "host: ", kubectl's "[pod/...]" and compose's
        # "name-1  | ". A body that starts with one is stripped further when parsed as a line of its own
        outer_only = {r.kind for r in STRONG + WEAK if r.outer_only}
        outer = [k for k in again.kinds if k != "indent"][:1]
        assert again.kinds == () or again.kinds[0] in outer_only or set(outer) <= outer_only and outer
        assert again.body == p.body or (outer and outer[0] in outer_only)
        assert p.body.endswith(again.body)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=9_999_999), st.lists(_PREFIXES, max_size=4).map("".join), _TEXT)
def test_outermost_rank_prefix_wins(rank: int, inner: str, tail: str) -> None:
    tail = tail.replace("\r", "")  # a carriage return would (rightly) discard the prefix before it
    assert parse_prefix(f"[rank{rank}]:{inner}{tail}").rank == rank
