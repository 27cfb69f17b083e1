"""Fuzzing `gpudoctor diagnose` end to end: arbitrary bytes, 50 MB lines, truncated and corrupt archives.
Whatever comes in: no traceback, and exit 0, 1 or 2 only."""
from __future__ import annotations

import bz2
import gzip
import io
import lzma

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudoctor.main import main

PORT = (b"torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
        b"address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use\n")
COMPRESS = [gzip.compress, lzma.compress, bz2.compress, lambda d: zstandard.ZstdCompressor().compress(d)]


class _Stdin(io.BytesIO):
    def fileno(self):  # not a terminal
        raise OSError("not a real file")


def _diagnose(tmp_path, data: bytes, *extra: str, via_stdin: bool = False) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    if via_stdin:
        import sys

        saved = sys.stdin
        sys.stdin = io.TextIOWrapper(_Stdin(data))
        try:
            code = main(["diagnose", *extra], stdout=out, stderr=err)
        finally:
            sys.stdin = saved
    else:
        path = tmp_path / "fuzz.log"
        path.write_bytes(data)
        code = main(["diagnose", str(path), *extra], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _check(code: int, err: str) -> None:
    assert code in (0, 1, 2), err
    assert "Traceback" not in err and "internal error" not in err


_CHUNKS = st.one_of(
    st.binary(max_size=400),
    st.sampled_from([PORT, b"\x1f\x8b\x08\x00", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd", b"BZh9", b"\x00" * 64,
                     b"\x1b]0;x\x07\x1b[31m", b"Traceback (most recent call last):\n", b"\r\n", b"\xff\xfe"]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(_CHUNKS, max_size=12), fmt=st.sampled_from(["text", "json", "markdown"]),
       stdin=st.booleans())
def test_arbitrary_bytes(tmp_path, parts, fmt, stdin):
    code, _, err = _diagnose(tmp_path, b"".join(parts), "--format", fmt, via_stdin=stdin)
    _check(code, err)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.integers(0, len(COMPRESS) - 1), cut=st.floats(0.0, 1.0), flip=st.integers(0, 1 << 20),
       stdin=st.booleans())
def test_truncated_and_corrupt_archives(tmp_path, kind, cut, flip, stdin):
    payload = b"noise line\n" * 5000 + PORT + b"tail line\n" * 5000
    data = bytearray(COMPRESS[kind](payload))
    data = data[: max(1, int(len(data) * cut))]
    if flip % 3 == 0 and len(data) > 20:
        data[10 + flip % (len(data) - 10)] ^= 0xFF  # one damaged byte past the header
    code, _, err = _diagnose(tmp_path, bytes(data), via_stdin=stdin)
    _check(code, err)


@pytest.mark.timeout(60)
def test_a_50_mb_line(tmp_path):
    line = b"x" * (25 << 20) + b" " + PORT.rstrip(b"\n") + b" " + b"y" * (25 << 20)
    code, out, err = _diagnose(tmp_path, line + b"\n", "--json")
    _check(code, err)
    assert code == 0 and "EADDRINUSE" in out and "scanned in pieces" in out


# one character run repeated into a long token: each of these once made a regex rescan the token from every position
# (a hex dump, a deep path, a digit string), so that a 100 KB line took seconds and a 600 KB one many minutes
LONG_TOKENS = ["a", "a/", "/a", "0", "a.", "a:", "a-", "\\a", "a_", ".", "0x", ":0", "a/b.cc:1 ", "x.py:1", "%", "-a"]


@pytest.mark.parametrize("unit", LONG_TOKENS)
def test_a_long_token_in_a_failure_line_is_read_in_linear_time(tmp_path, unit):
    import time

    blob = (unit * (200_000 // len(unit) + 1))[:200_000]
    data = ("Traceback (most recent call last):\nRuntimeError: NCCL error in: x.cpp:1, " + blob + " end\n"
            + blob + " NCCL WARN timeout\n").encode()
    start = time.perf_counter()
    code, out, err = _diagnose(tmp_path, data)
    assert code in (0, 1) and "Traceback" not in err, err
    assert time.perf_counter() - start < 8  # about 0.5 s each here; quadratic was over 40 s at this size


# a rule's own trigger repeated along one long line: each of these once made a rule rescan the rest of the line from
# every repetition (the DeepSpeed teardown's prefix, its argv before a return code, argparse's usage after blank lines)
REPEATED_TRIGGERS = [
    ("sigkill_handler] ", "Killing subprocess 12\n"),
    ("'--local_rank=1', ", "] exits with return code = -7\n"),
    ("\n", "usage: train.py [-h] [--local_rank L]\nIf your script expects `--local-rank` argument to be set\n"),
    ("18679/18686 [1:50:07<00:02, 2.83it/s] ", "\n"),
    ("Sending process 4 closing signal SIGTERM ", "\nRuntimeError: CUDA error: invalid device ordinal\n"),
    ("torch_xla/distributed/xla_multiprocessing.py ", "\nAssertionError: Default process group is not initialized\n"),
    ("torch/nn/modules/batchnorm.py ", "\nValueError: Default process group has not been initialized\n"),
    ('  File "x/distributed_c10d.py", line 4, in _get_default_group ', ""),
    ("[comm.py:637:init_distributed] cdb=None ", "\nRuntimeError: CUDA error: invalid device ordinal\n"),
    ('  File "x/torch/nn/parallel/data_parallel.py", line 9, in forward ', ""),
    ("Expected all tensors to be on the same device, but found at least two devices, cuda:1 and cuda:0! ", "\n"),
    ("to have the same device as tensor for argument #2 'weight'; but device 1 does not equal 0 ", "\n"),
    ("You requested gpu: [0, 1] ", "But your machine only has: [0]\n"),
    ("Root Cause (first observed failure): [0]: time : x ", "\n<NO_OTHER_FAILURES>\nConnection closed by peer\n"),
]


@pytest.mark.parametrize("unit, tail", REPEATED_TRIGGERS)
def test_a_rule_trigger_repeated_along_a_line_is_read_in_linear_time(tmp_path, unit, tail):
    import time

    data = ((unit * (3_000_000 // len(unit)))[:3_000_000] + tail).encode()
    start = time.perf_counter()
    code, out, err = _diagnose(tmp_path, data)
    assert code in (0, 1) and "Traceback" not in err, err
    assert time.perf_counter() - start < 10  # a few seconds here at most; quadratic was minutes at this size
