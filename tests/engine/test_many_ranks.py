"""A directory of many per-rank logs: the worker pool reads it as one process would, rank by rank."""
from __future__ import annotations

import io

import pytest

import gpudoctor.engine.diagnose as diagnose_mod
import gpudoctor.engine.parallel as par
from gpudoctor.engine.diagnose import diagnose, pattern_set
from gpudoctor.engine.scan import Scanner
from gpudoctor.engine.sources import open_source, resolve
from gpudoctor.kb.catalog import load_catalog

RANKS = 150  # enough files for full batches, shrinking batches and a last short one
CRASHED = 37


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(use_cache=False)


def _rank_log(k: int) -> bytes:
    lines = [f"gpu-node-{k // 8:03d}:{4000 + k}:{5000 + k} [{k % 8}] NCCL INFO comm 0x7f{k:04x} rank {k} nranks {RANKS} "
             f"cudaDev {k % 8} nvmlDev {k % 8} busId 1{k % 8}000 - Init COMPLETE"]
    # rank k's files differ in length, so the batches differ in bytes as well as in files
    for step in range(20 + k % 17):
        lines.append(f"[rank{k}]:[I1122 01:{step % 60:02d}:03.026000 8038 train.py:88] step {step} loss 0.{k + step:03d}")
        lines.append(f"gpu-node-{k // 8:03d}:{4000 + k}:{5000 + k} [{k % 8}] NCCL INFO AllReduce: opCount {step:x} "
                     f"sendbuff 0x7fe6117c61 recvbuff 0x7f8f5a926f count 1966498 datatype 7 op 0 root 0 [nranks={RANKS}]")
    if k == CRASHED:
        lines += [f"[rank{k}]: Traceback (most recent call last):",
                  f'[rank{k}]:   File "/job/train.py", line 88, in <module>',
                  f"[rank{k}]:     loss = model(batch).sum()",
                  f"[rank{k}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total "
                  f"capacity of 79.10 GiB of which 1.06 GiB is free."]
    elif k % 50 != 7:  # a few ranks say nothing at the end
        lines.append(f"[rank{k}]:[E1122 01:58:03.026000 8038 ProcessGroupNCCL.cpp:616] [Rank {k}] Watchdog caught "
                     f"collective operation timeout: WorkNCCL(SeqNum={57 + (k == 3)}, OpType=ALLREDUCE, NumelIn=1048576, "
                     f"NumelOut=1048576, Timeout(ms)=1800000) ran for 1800093 milliseconds before timing out.")
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture(scope="module")
def rank_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("ranks")
    for k in range(RANKS):
        (root / f"rank{k}.log").write_bytes(_rank_log(k))
    return root


def _report(result) -> dict:
    from gpudoctor.report import to_json

    payload = to_json(result)
    payload["findings"] = [{k: f[k] for k in ("id", "tier", "score", "evidence")} for f in payload["findings"]]
    return payload


def _diagnose(catalog, rank_dir, monkeypatch, workers: int) -> dict:
    with monkeypatch.context() as m:
        m.setattr(diagnose_mod, "HYPERSCAN_FROM_BYTES", 1)  # the big-input path, whatever the size
        m.setattr(par, "PARALLEL_FROM_BYTES", 1)
        m.setattr(par, "workers", lambda: workers)
        return _report(diagnose(catalog, resolve([str(rank_dir)])))


def test_the_pool_reads_a_rank_directory_as_one_process_does(catalog, rank_dir, monkeypatch):
    alone = _diagnose(catalog, rank_dir, monkeypatch, 1)  # one worker: no pool, every file read in order
    assert alone["findings"]
    assert any(f"rank {CRASHED} failed first" in v for v in alone["verdict"]), alone["verdict"]
    assert len(alone["inputs"]) == RANKS and all(i["lines"] > 40 for i in alone["inputs"])
    for workers in (2, 3):
        assert _diagnose(catalog, rank_dir, monkeypatch, workers) == alone, workers


@pytest.mark.parametrize("workers", [2, 3])
def test_every_rank_file_comes_back_once_in_order_and_as_scanned_alone(catalog, rank_dir, monkeypatch, workers):
    monkeypatch.setattr(par, "PARALLEL_FROM_BYTES", 1)
    monkeypatch.setattr(par, "workers", lambda: workers)
    sources = resolve([str(rank_dir)])
    scanner = Scanner(pattern_set(catalog))
    seen = []
    pooled = par.scan_parallel(scanner, sources, on_result=lambda i, scan: seen.append(i))
    assert seen == list(range(len(sources)))
    for source, scan in zip(sources, pooled):
        with open_source(source) as stream:
            alone = scanner.scan(stream, source.name, None, source.size)
        assert (scan.name, scan.lines, scan.bytes, scan.tail, scan.windows) == (
            alone.name, alone.lines, alone.bytes, alone.tail, alone.windows)
        assert {i: (h.count, h.all()) for i, h in scan.hits.items()} == {
            i: (h.count, h.all()) for i, h in alone.hits.items()}


def test_batches_cover_every_file_once_and_shrink_towards_the_end(monkeypatch, tmp_path):
    jobs = []

    def record(ctx, n, job_list, sources, progress, on_result):
        jobs.extend(job_list)
        return [None] * len(sources)

    monkeypatch.setattr(par, "PARALLEL_FROM_BYTES", 1)
    monkeypatch.setattr(par, "workers", lambda: 2)
    monkeypatch.setattr(par, "_run_pool", record)
    for k in range(1000):
        (tmp_path / f"r{k}.log").write_bytes(b"x\n")
    sources = resolve([str(tmp_path)])
    par.scan_parallel(Scanner(pattern_set(load_catalog())), sources)
    sizes = [len(indexes) for indexes, _ in jobs]
    assert [i for indexes, _ in jobs for i in indexes] == list(range(1000))
    assert max(sizes) == par.MAX_BATCH and sizes[-2] == par.MIN_BATCH
    assert sizes[:-1] == sorted(sizes[:-1], reverse=True)  # only the last may be shorter than the ones before
    assert len(sizes) < 1000 // par.MIN_BATCH  # far fewer round trips than one per small batch


def test_a_hit_line_parsed_twice_is_the_same_frozen_prefix():
    from gpudoctor.engine.prefix import parse_hit_prefix, parse_prefix

    line = "[rank3]:[E1122 01:58:03.026000 8038 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective"
    assert parse_hit_prefix(line) == parse_prefix(line)
    assert parse_hit_prefix(line) is parse_hit_prefix(line)
    with pytest.raises(AttributeError):
        parse_hit_prefix(line).rank = 4  # shared between callers, so it must stay frozen
    assert parse_hit_prefix(line).rank == 3


def test_a_scan_of_many_small_streams_counts_lines_exactly(catalog):
    scanner = Scanner(pattern_set(catalog))
    for k in range(0, RANKS, 7):
        data = _rank_log(k)
        assert scanner.scan(io.BytesIO(data), "x").lines == data.count(b"\n")
