"""Every input a user has: files, directories, globs, stdin, compressed by content, damaged, vanished, closed."""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import subprocess
import sys

import pytest
import zstandard

from gpudoctor.engine.sources import Source, codec_of, open_source, resolve

PORT = (b"torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
        b"address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use\n")
LOG = b"starting\n" * 300 + PORT + b"after\n" * 3000
CODECS = {
    "gzip": gzip.compress,
    "xz": lzma.compress,
    "bzip2": bz2.compress,
    "zstd": lambda data: zstandard.ZstdCompressor().compress(data),
}


def _read_all(stream) -> bytes:
    out = bytearray()
    buf = bytearray(1 << 16)
    view = memoryview(buf)
    while True:
        n = stream.readinto(view)
        if not n:
            return bytes(out)
        out += buf[:n]


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_files_are_read_by_content_not_by_name(tmp_path, codec):
    path = tmp_path / "job.log"  # no telling suffix
    path.write_bytes(CODECS[codec](LOG))
    (source,) = resolve([str(path)])
    assert source.codec == codec and source.compressed
    stream = open_source(source)
    assert _read_all(stream) == LOG and stream.problem is None


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_stdin_is_decompressed(codec):
    stream = open_source(Source("<stdin>", None, None), io.BytesIO(CODECS[codec](LOG)))
    assert _read_all(stream) == LOG


@pytest.mark.parametrize("codec", ["gzip", "xz", "zstd"])
def test_a_truncated_archive_keeps_what_was_read_and_names_the_problem(tmp_path, codec):
    big = b"".join(b"line %d of a long training log with some words in it\n" % i for i in range(200_000))
    data = CODECS[codec](big)
    path = tmp_path / f"cut.{codec}"
    path.write_bytes(data[: len(data) * 2 // 3])
    stream = open_source(resolve([str(path)])[0])
    got = _read_all(stream)
    assert len(got) > len(big) // 3 and big.startswith(got)
    assert stream.problem is not None and str(path) in stream.problem


def test_magic_bytes():
    assert codec_of(b"\x1f\x8b\x08") == "gzip"
    assert codec_of(b"\xfd7zXZ\x00rest") == "xz"
    assert codec_of(b"\x28\xb5\x2f\xfdrest") == "zstd"
    assert codec_of(b"BZh91AY") == "bzip2"
    assert codec_of(b"[rank0]: hello") is None


def test_directory_walk_names_a_vanished_file_and_reads_the_rest(tmp_path):
    (tmp_path / "rank0.log").write_bytes(PORT)
    (tmp_path / "rank1.log").symlink_to(tmp_path / "gone.log")  # dangling: the file vanished
    (tmp_path / ".hidden").write_bytes(b"x")
    problems: list[str] = []
    sources = resolve([str(tmp_path)], problems)
    assert [s.name for s in sources] == [str(tmp_path / "rank0.log")]
    assert problems == [f"{tmp_path / 'rank1.log'}: no such file or directory"]
    with pytest.raises(Exception):
        resolve([str(tmp_path)])  # without a list to collect into, the first problem raises


def test_quoted_glob_is_expanded_in_natural_order(tmp_path):
    for r in (10, 2, 1):
        (tmp_path / f"rank{r}.log").write_bytes(b"x\n")
    sources = resolve([str(tmp_path / "rank*.log")])
    assert [s.rank_hint for s in sources] == [1, 2, 10]
    problems: list[str] = []
    assert resolve([str(tmp_path / "nothing*.log")], problems) == []
    assert "no file matches" in problems[0]


def test_a_quoted_glob_reads_its_members_as_a_directorys_are(tmp_path):
    """A named pipe the pattern matches is skipped (opening it would block), a member that went away (a dangling
    link) is named, and the others are read."""
    (tmp_path / "rank0.log").write_bytes(b"RuntimeError: Address already in use\n")
    os.mkfifo(tmp_path / "rank1.log")
    (tmp_path / "rank2.log").symlink_to(tmp_path / "gone.log")
    problems: list[str] = []
    sources = resolve([str(tmp_path / "rank*.log")], problems)
    assert [s.name for s in sources] == [str(tmp_path / "rank0.log")]
    assert "rank1.log: skipped, not a regular file" in problems[0] and "rank2.log: no such file" in problems[1]
    done = _gd("diagnose", str(tmp_path / "rank*.log"))
    assert done.returncode == 0 and b"D4" in done.stdout and b"rank1.log: skipped" in done.stderr


def _gd(*argv, input=None, **kw):
    return subprocess.run([sys.executable, "-m", "gpudoctor", *argv], input=input, capture_output=True, timeout=60,
                          **kw)


def test_an_unreadable_file_is_named_on_stderr_and_the_others_are_diagnosed(tmp_path):
    good = tmp_path / "good.log"
    good.write_bytes(PORT)
    r = _gd("diagnose", str(good), str(tmp_path / "missing.log"))
    assert r.returncode == 0
    assert b"D4" in r.stdout
    assert f"{tmp_path / 'missing.log'}: no such file or directory".encode() in r.stderr
    assert b"Traceback" not in r.stderr


def test_a_file_that_vanishes_after_listing_is_named_and_the_rest_read(tmp_path, catalog_for_sources):
    from gpudoctor.engine.diagnose import diagnose

    a, b = tmp_path / "rank0.log", tmp_path / "rank1.log"
    a.write_bytes(PORT)
    b.write_bytes(b"ok\n")
    sources = resolve([str(tmp_path)])
    b.unlink()
    result = diagnose(catalog_for_sources, sources)
    assert [f.id for f in result.findings][:1] == ["D4"]
    assert [i.problem for i in result.inputs if i.problem] == [f"{b}: no such file or directory"]


@pytest.fixture(scope="module")
def catalog_for_sources():
    from gpudoctor.kb.catalog import load_catalog

    return load_catalog()


def test_zstd_on_stdin_through_a_real_pipe():
    r = _gd("diagnose", "--json", input=CODECS["zstd"](LOG))
    assert r.returncode == 0, r.stderr
    assert b'"D4"' in r.stdout


def test_closed_stdin_and_closed_stdout_end_quietly(tmp_path):
    log = tmp_path / "a.log"
    log.write_bytes(PORT)
    closed_in = _gd("diagnose", stdin=subprocess.DEVNULL, input=None, preexec_fn=lambda: os.close(0))
    assert closed_in.returncode == 2 and b"standard input is closed" in closed_in.stderr
    assert b"Traceback" not in closed_in.stderr
    closed_out = subprocess.run([sys.executable, "-m", "gpudoctor", "diagnose", str(log)], stderr=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, preexec_fn=lambda: os.close(1), timeout=60)
    assert closed_out.returncode == 0 and closed_out.stderr == b""


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path):
    log = tmp_path / "big.log"
    log.write_bytes(b"[rank0]: step 1 loss 0.5\n" * 200_000 + PORT)
    proc = subprocess.Popen([sys.executable, "-m", "gpudoctor", "list"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.read(10)
    proc.stdout.close()  # like `| head -c 10`
    _, err = proc.communicate(timeout=60)
    assert b"Traceback" not in err and proc.returncode in (0, 1)


def test_an_internal_error_exits_3_and_names_the_report_file(tmp_path):
    env = dict(os.environ, GPUDOCTOR_CACHE_DIR=str(tmp_path / "cache"))
    # a catalogue loader that crashes: the kind of bug main() must turn into one line and exit 3
    code = ("import sys, gpudoctor.kb.catalog as c\n"
            "def boom(*a, **k): raise ZeroDivisionError('deliberate')\n"
            "c.load_catalog = boom\n"
            "from gpudoctor.main import main\n"
            "sys.exit(main(['show', 'D8']))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=60)
    assert r.returncode == 3
    lines = r.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "internal error" in lines[0] and "ZeroDivisionError" in lines[0]
    reports = list((tmp_path / "cache").glob("crash-*.txt"))
    assert len(reports) == 1 and str(reports[0]) in lines[0]
    assert "Traceback" in reports[0].read_text() and "deliberate" in reports[0].read_text()


def test_an_open_source_reads_to_its_end_without_a_size(tmp_path):
    import gzip
    import os

    from gpudoctor.engine.sources import open_source, resolve

    data = os.urandom(3 << 20).hex().encode()  # 6 MiB inflated: more than one underlying read
    path = tmp_path / "job.log.gz"
    path.write_bytes(gzip.compress(data))
    with open_source(resolve([str(path)])[0]) as stream:
        assert stream.read() == data
    with open_source(resolve([str(path)])[0]) as stream:
        assert 0 < len(stream.read(10)) <= 10


@pytest.mark.parametrize("argv", [("diagnose",), ("fix", "D22", "--script")])
def test_a_path_given_with_control_characters_is_shown_escaped_in_the_error(tmp_path, argv):
    bad = str(tmp_path / "x\x1b]0;PWN\x07\x1b[2J\x07y.log")
    done = _gd(*argv, bad)
    assert done.returncode == 2 and b"\x1b" not in done.stderr and b"\x07" not in done.stderr, done.stderr


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be-bom"])
def test_a_utf16_log_with_its_byte_order_mark_is_read_as_text(tmp_path, encoding):
    """Windows PowerShell's `>` writes UTF-16 with a byte-order mark: a file of it, or stdin, reads as the same text."""
    text = "step 1 ok \u2014 \u4e2d\nRuntimeError: Address already in use\n"
    data = (b"\xfe\xff" + text.encode("utf-16-be")) if encoding == "utf-16-be-bom" else text.encode("utf-16")
    log = tmp_path / "ps.log"
    log.write_bytes(data + b"\x00")  # an odd last byte as well: replaced, never a crash
    for done in (_gd("diagnose", "--json", str(log)), _gd("diagnose", "--json", input=data)):
        assert done.returncode == 0, done.stderr
        found = __import__("json").loads(done.stdout)["findings"][0]
        assert found["id"] == "D4" and found["evidence"][0]["text"] == "RuntimeError: Address already in use"
        assert b"binary" not in done.stderr


def test_the_utf16_reader_never_hands_back_more_than_asked_and_keeps_pairs_across_reads():
    from gpudoctor.engine.transcode import Utf16Reader

    text = ("\U0001f600 rank 3 \u00e9" * 5000) + "\n"
    reader = Utf16Reader(io.BytesIO(text.encode("utf-16")))
    parts = []
    while True:
        part = reader.read1(7)
        assert len(part) <= 7
        if not part:
            break
        parts.append(part)
    assert b"".join(parts).decode("utf-8") == text
