"""`gpudoctor diagnose` on archives of logs (tar, compressed tar, zip; files and stdin): each file inside is a log
of its own, a cut-off archive keeps what came before the cut, and nothing is left behind on disk."""
from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from gpudoctor.engine.sources import resolve

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rank-crash-then-timeout"
RANKS = sorted(p.name for p in EXAMPLE.iterdir() if p.name.startswith("rank"))


def _tar(path: Path, mode: str = "w:gz", extra: dict | None = None) -> Path:
    with tarfile.open(path, mode) as tar:
        for p in sorted(EXAMPLE.iterdir()):
            tar.add(p, arcname=f"job/{p.name}")
        for name, data in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _zip(path: Path) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(EXAMPLE.iterdir()):
            zf.write(p, f"job/{p.name}")
        zf.writestr("__MACOSX/job/._rank0.log", b"\x00\x05\x16\x07 resource fork")
    return path


def _ranks(out: str) -> list[str]:
    """The RANK column of the text report's rank table."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Ranks"))
    rows = []
    for line in lines[start + 2:]:
        if not line.strip():
            break
        rows.append(line.split()[0])
    return rows


@pytest.mark.parametrize("suffix, mode", [("tgz", "w:gz"), ("tar", "w"), ("tar.xz", "w:xz"), ("tar.bz2", "w:bz2")])
def test_each_file_in_a_tar_is_a_log_of_its_own(cli_proc, tmp_path, suffix, mode):
    archive = _tar(tmp_path / f"logs.{suffix}", mode)
    r = cli_proc("diagnose", "--no-color", str(archive), env={"TMPDIR": str(tmp_path), "COLUMNS": "300"})
    assert r.code == 0, r.err
    head = r.out.splitlines()[0]  # a long path is cut in its middle: the count and the member folder stay
    assert head.startswith(f"1 known cause in {len(RANKS) + 1} files in /") and head.endswith("/job/ (162 lines)")
    assert "D20" in r.out and "rank2.log:16" in r.out  # evidence is located by member and line
    assert _ranks(r.out) == ["0", "1", "2", "3"]  # ranks read off the members' names, as in a directory
    assert "MN5" not in r.out and "\\x00" not in r.out  # the archive's headers are not read as log lines
    assert not list(tmp_path.glob("gpudoctor-archive-*"))  # the scratch copies are gone when the run ends


def test_a_zip_reads_the_same_and_skips_resource_forks(cli_proc, tmp_path):
    archive = _zip(tmp_path / "logs.zip")
    r = cli_proc("diagnose", "--json", str(archive), env={"TMPDIR": str(tmp_path)})
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["findings"][0]["id"] == "D20"
    files = {i["name"] for i in doc["inputs"]}
    assert files == {f"{archive}/job/{p.name}" for p in EXAMPLE.iterdir()}
    assert not list(tmp_path.glob("gpudoctor-archive-*"))


@pytest.mark.parametrize("make", [_tar, _zip], ids=["tgz", "zip"])
def test_an_archive_piped_to_stdin_is_read_member_by_member(cli_proc, tmp_path, make):
    archive = make(tmp_path / "logs.bin")
    r = cli_proc("diagnose", "--no-color", input=archive.read_bytes(), env={"TMPDIR": str(tmp_path)})
    assert r.code == 0, r.err
    assert "files in <stdin>/job/" in r.out.splitlines()[0] and _ranks(r.out) == ["0", "1", "2", "3"]
    assert not list(tmp_path.glob("gpudoctor-archive-*"))


def test_a_plain_log_on_stdin_is_not_taken_for_an_archive(cli_proc):
    log = (EXAMPLE / "rank2.log").read_bytes()
    r = cli_proc("diagnose", "--json", input=log)
    doc = json.loads(r.out)
    assert [i["name"] for i in doc["inputs"]] == ["<stdin>"] and doc["inputs"][0]["lines"] == log.count(b"\n")


@pytest.mark.parametrize("make, keep", [(_tar, 2000), (_zip, 3000)], ids=["tgz", "zip"])
def test_a_cut_off_archive_keeps_the_files_before_the_cut_and_says_so(cli_proc, tmp_path, make, keep):
    whole = make(tmp_path / "whole.bin")
    cut = tmp_path / "cut.bin"
    cut.write_bytes(whole.read_bytes()[:keep])
    r = cli_proc("diagnose", "--json", str(cut), env={"TMPDIR": str(tmp_path)})
    assert r.code in (0, 1), r.err
    assert "Traceback" not in r.err and "ends early or is damaged" in r.err
    assert "read before the break" in r.err and "kept" in r.err
    names = [i["name"] for i in json.loads(r.out)["inputs"]]
    assert names and all(n.startswith(f"{cut}/job/") for n in names)
    assert len(names) < len(list(EXAMPLE.iterdir()))


def test_member_names_never_become_paths_and_links_are_skipped(tmp_path):
    archive = _tar(tmp_path / "evil.tgz", extra={"../../escaped.log": b"RuntimeError: boom\n", ".hidden.log": b"x\n"})
    with tarfile.open(tmp_path / "links.tar", "w") as tar:
        link = tarfile.TarInfo("job/rank9.log")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    problems: list[str] = []
    sources = resolve([str(archive), str(tmp_path / "links.tar")], problems)
    names = [s.name for s in sources]
    assert f"{archive}/../../escaped.log" in names and not any(".hidden" in n for n in names)
    assert not (tmp_path.parent.parent / "escaped.log").exists()
    assert all(s.path.parent.name.startswith("gpudoctor-archive-") for s in sources)  # copies in the scratch folder
    assert problems == [f"{tmp_path / 'links.tar'}: the tar archive holds no files"]
    assert next(s for s in sources if s.name.endswith("/job/rank3.log")).rank_hint == 3


def test_an_empty_archive_is_an_input_error(cli_proc, tmp_path):
    empty = tmp_path / "empty.zip"
    zipfile.ZipFile(empty, "w").close()
    r = cli_proc("diagnose", str(empty))
    assert r.code == 2 and "holds no files" in r.err and "Traceback" not in r.err


def test_an_encrypted_zip_member_is_named_and_skipped_and_the_others_read(tmp_path):
    import struct

    archive = tmp_path / "logs.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("job/rank0.log", (EXAMPLE / "rank0.log").read_bytes())
        zf.writestr("job/rank2.log", (EXAMPLE / "rank2.log").read_bytes())
    data = bytearray(archive.read_bytes())
    with zipfile.ZipFile(archive) as zf:
        second = zf.getinfo("job/rank2.log")
    data[second.header_offset + 6] |= 0x01  # the local header's "encrypted" flag
    central = max(i for i in range(len(data)) if data.startswith(b"PK\x01\x02", i)
                  and struct.unpack_from("<I", data, i + 42)[0] == second.header_offset)
    data[central + 8] |= 0x01  # and the central directory's
    archive.write_bytes(bytes(data))
    problems: list[str] = []
    sources = resolve([str(archive)], problems)
    assert [s.name for s in sources] == [f"{archive}/job/rank0.log"]
    assert len(problems) == 1 and "job/rank2.log skipped" in problems[0] and "password-protected zip" in problems[0]
    assert "ZipInfo" not in problems[0]
    assert len(list(sources[0].path.parent.iterdir())) == 1  # the skipped member left no file behind


def test_the_member_a_cut_tar_breaks_in_keeps_every_byte_that_was_decompressed(cli_proc, tmp_path):
    import random

    rng = random.Random(7)
    lines = [f"step {i} loss {rng.random():.5f} tok {rng.getrandbits(64):x}" for i in range(12_000)]
    lines.insert(100, "RuntimeError: CUDA error: invalid device ordinal")
    data = ("\n".join(lines) + "\n").encode()
    whole = _one_member_tgz(tmp_path / "whole.tgz", "job/rank0.log", data)
    cut = tmp_path / "cut.tgz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])  # inside the one member, under 1 MiB in
    r = cli_proc("diagnose", "--json", str(cut), env={"TMPDIR": str(tmp_path)})
    assert "ends early or is damaged" in r.err and "Traceback" not in r.err
    doc = json.loads(r.out)
    (member,) = doc["inputs"]
    # everything zlib could inflate before the cut, less the member's 512-byte header, is read
    inflated = _inflated_prefix(cut.read_bytes())
    assert member["bytes"] == len(inflated) - 512 and member["bytes"] > len(data) // 3
    assert doc["findings"] and doc["findings"][0]["id"] in ("D27", "D3")  # from line 101, kept


def _one_member_tgz(path: Path, name: str, data: bytes) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def _inflated_prefix(gz: bytes) -> bytes:
    import zlib

    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    return d.decompress(gz)


@pytest.mark.parametrize("fmt", ["text", "markdown", "json"])
def test_control_characters_in_file_and_member_names_never_reach_the_terminal(cli_proc, tmp_path, fmt):
    data = b"RuntimeError: CUDA error: invalid device ordinal\n"
    archive = _one_member_tgz(tmp_path / "job.tgz", "job/\x1b[31mrank0\x07.log", data)
    odd = tmp_path / "rank1\x1b]0;title\x07.log"
    odd.write_bytes(data)
    for given in (archive, odd):
        r = cli_proc("diagnose", "--format", fmt, str(given), env={"TMPDIR": str(tmp_path)})
        assert r.code == 1, r.err
        assert "\x1b" not in r.out + r.err and "\x07" not in r.out + r.err
        if fmt == "json":
            (name,) = [i["name"] for i in json.loads(r.out)["inputs"]]
            assert name.endswith(("/rank0\\x07.log", "/rank1.log")), name  # BEL escaped; an OSC title cut


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_an_archive_that_expands_far_past_its_size_is_cut_and_says_so(cli, tmp_path, monkeypatch, kind):
    from gpudoctor.engine import archives

    monkeypatch.setattr(archives, "MIN_CAP", 1 << 20)  # 1 MiB, so that a 24 MiB member of zeros passes it
    zeros, port = b"\0" * (24 << 20), b"RuntimeError: Address already in use\n"
    path = tmp_path / f"bomb.{kind}"
    if kind == "zip":
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("rank0.log", zeros)
            z.writestr("rank1.log", port)
    else:
        with tarfile.open(path, "w:gz") as tar:
            for name, data in (("rank0.log", zeros), ("rank1.log", port)):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    assert path.stat().st_size < 100 << 10
    seen = []
    real_open = archives._Out.open
    monkeypatch.setattr(archives._Out, "open", lambda self, name: seen.append(self) or real_open(self, name))
    res = cli("diagnose", "--no-color", str(path))
    assert "expand past" in res.err and "rank0.log is cut there" in res.err, res.err
    assert "D4" not in res.out  # rank1.log, after the cut, was skipped
    cap = max(archives.MIN_CAP, archives.RATIO * path.stat().st_size)
    assert sum(p.stat().st_size for p in seen[0].folder.iterdir()) <= cap < 24 << 20


def test_a_compressed_log_cut_before_its_first_byte_says_nothing_was_kept(cli, tmp_path):
    import zstandard

    whole = zstandard.ZstdCompressor().compress((EXAMPLE / "launcher.log").read_bytes())
    cut = tmp_path / "cut.log.zst"
    cut.write_bytes(whole[:40])
    res = cli("diagnose", str(cut))
    assert res.code == 2 and "nothing in it could be read" in res.err and "is kept" not in res.err, res.err


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_a_run_ended_by_sigterm_or_sighup_removes_its_scratch_folder(tmp_path, signame):
    """An SSH drop (SIGHUP) or a scheduler's time limit (SIGTERM) mid-diagnosis: the copied logs do not stay behind."""
    import os
    import random
    import signal
    import subprocess
    import sys
    import time

    rng = random.Random(7)
    lines = "".join(f"[rank0]: step {i} loss {rng.random():.6f} tokens {rng.randrange(10**9)}\n" for i in range(400_000))
    archive = tmp_path / "job.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        data = lines.encode()
        info = tarfile.TarInfo("rank0.log")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "gpudoctor", "diagnose", "--engine", "python", str(archive)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "TMPDIR": str(scratch)})
    deadline = time.monotonic() + 60
    while not any(scratch.iterdir()) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert any(scratch.iterdir()), "the run never made its scratch folder"
    proc.send_signal(getattr(signal, signame))
    assert proc.wait(timeout=60) == 128 + getattr(signal, signame)
    assert not any(scratch.iterdir())


def test_an_archive_three_levels_deep_is_named_not_scanned_as_bytes(tmp_path):
    data, name = b"RuntimeError: Address already in use\n", "a.log"
    for i in range(3):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:  # stored: the innermost text stays readable in the outer bytes
            z.writestr(name, data)
        data, name = buf.getvalue(), f"l{i}.zip"
    archive = tmp_path / "deep.zip"
    archive.write_bytes(data)
    problems: list[str] = []
    assert resolve([str(archive)], problems) == []
    assert problems == [f"{archive}/l1.zip/l0.zip: a zip archive 3 levels deep, not expanded (unpack it and pass its "
                        "files)"]
