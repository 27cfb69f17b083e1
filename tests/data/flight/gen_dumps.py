"""Produce real flight recorder dumps from 4-rank gloo jobs on CPU, one folder per failure scenario.

Run from the repo root with the project venv: `python tests/data/flight/gen_dumps.py [SCENARIO...]`.

torch 2.13 keeps a flight recorder for gloo too (TORCH_FR_BUFFER_SIZE, default 2000 entries), but only
the NCCL watchdog writes it to TORCH_FR_DUMP_TEMP_FILE on a timeout. So each rank here asks for the very
bytes that writer would write (`_dump_fr_trace()`, a pickle; `_dump_fr_trace_json()`, JSON) and saves them
under the writer's naming scheme, `<prefix><rank>` with the default prefix `nccl_trace_rank_`.

Every job does the same warm-up (all_reduce on the world, all_reduce on a [0, 1] subgroup described as
"pair", a broadcast), then one faulty gradient all_reduce. The group timeout is 2 s so hangs end quickly.
"""
from __future__ import annotations

import datetime
import gzip
import multiprocessing
import os
import shutil
import socket
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORLD = 4
TIMEOUT_S = 2

# scenario -> what goes wrong in the faulty all_reduce (collective #3 on the default group)
SCENARIOS = {
    "healthy": "every rank joins with the same float32[16]",
    "missing_rank": "rank 2 skips it (sleeps past the timeout instead)",
    "size_mismatch": "rank 3 passes float32[32] while the others pass float32[16] (gloo aborts a rank)",
    "shape_mismatch": "rank 3 passes float32[4, 4] while the others pass float32[16] (completes silently)",
    "dtype_mismatch": "rank 1 passes int32[16] while the others pass float32[16] (completes silently)",
    "op_mismatch": "rank 1 calls broadcast while the others call all_reduce (times out)",
    "skip_and_dtype": "rank 2 skips it and rank 1 passes int32[16]",
}


def _timeout_s(scenario: str) -> int:
    # size_mismatch needs rank 3 to arrive before the others time out, after they have written their dumps
    # (a dump with stack traces takes a while on 2 cores), so that gloo really sees the odd size.
    return 15 if scenario == "size_mismatch" else TIMEOUT_S


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_dumps(out: Path, rank: int) -> None:
    import torch

    c10d = torch._C._distributed_c10d
    (out / f"nccl_trace_rank_{rank}").write_bytes(c10d._dump_fr_trace())
    (out / "json").mkdir(exist_ok=True)
    (out / "json" / f"nccl_trace_rank_{rank}.json").write_bytes(c10d._dump_fr_trace_json())


def _worker(scenario: str, rank: int, port: int, out: str) -> None:
    os.environ["TORCH_FR_BUFFER_SIZE"] = "200"
    import torch
    import torch.distributed as dist

    out_dir = Path(out)
    # The store gets a long timeout of its own: 4 ranks importing torch on 2 cores can take more than
    # the 2 s collective timeout just to connect.
    store = dist.TCPStore("127.0.0.1", port, WORLD, rank == 0, timeout=datetime.timedelta(seconds=60))
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=_timeout_s(scenario)),
    )
    pair = dist.new_group([0, 1], group_desc="pair")
    grad = torch.ones(16)
    dist.all_reduce(grad)
    if rank in (0, 1):
        dist.all_reduce(grad, group=pair)
    dist.broadcast(grad, src=0)

    int_grad = torch.ones(16, dtype=torch.int32)
    try:
        if scenario == "size_mismatch":
            # gloo kills a receiving rank with SIGABRT once the odd-sized data arrives, so every rank dumps
            # right after enqueueing, and rank 3 enqueues only once the others have dumped (marker files,
            # because the store lives in rank 0, which may be gone by then).
            if rank == 3:
                deadline = time.monotonic() + 30
                while not all((out_dir / f".dumped{r}").exists() for r in range(3)):
                    if time.monotonic() > deadline:
                        raise RuntimeError("ranks 0-2 never dumped")
                    time.sleep(0.01)
                work = dist.all_reduce(torch.ones(32), async_op=True)
                _write_dumps(out_dir, rank)
            else:
                work = dist.all_reduce(grad, async_op=True)
                _write_dumps(out_dir, rank)
                (out_dir / f".dumped{rank}").touch()
            work.wait()
            return
        if scenario in ("missing_rank", "skip_and_dtype") and rank == 2:
            time.sleep(_timeout_s(scenario) + 1.5)
        elif scenario == "shape_mismatch" and rank == 3:
            dist.all_reduce(torch.ones(4, 4))
        elif scenario in ("dtype_mismatch", "skip_and_dtype") and rank == 1:
            dist.all_reduce(int_grad)
        elif scenario == "op_mismatch" and rank == 1:
            dist.broadcast(grad, src=0)
        else:
            dist.all_reduce(grad)
        print(f"[{scenario}] rank {rank}: collective returned", flush=True)
    except RuntimeError as exc:
        print(f"[{scenario}] rank {rank}: {str(exc).splitlines()[0][:120]}", flush=True)
    finally:
        if scenario != "size_mismatch":
            _write_dumps(out_dir, rank)
        sys.stdout.flush()
        # Tearing down a group that just timed out can hang; the dumps are written, so leave now.
        os._exit(0)


def generate(scenario: str) -> None:
    out = HERE / scenario
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    ctx = multiprocessing.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(scenario, r, port, str(out))) for r in range(WORLD)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        if p.is_alive():
            p.kill()
            p.join()
    codes = [p.exitcode for p in procs]
    for marker in out.glob(".dumped*"):  # size_mismatch's hand-off
        marker.unlink()
    written = sorted(f.name for f in out.iterdir() if f.is_file())
    print(f"[{scenario}] exit codes {codes}; wrote {written}", flush=True)
    if len(written) != WORLD:
        raise SystemExit(f"{scenario}: expected {WORLD} dumps, got {written}")
    if scenario == "missing_rank":
        (out / "gz").mkdir()
        for name in written:
            data = (out / name).read_bytes()
            # mtime=0 keeps the .gz bytes stable across runs
            (out / "gz" / f"{name}.gz").write_bytes(gzip.compress(data, mtime=0))


def _origin(path: Path) -> str:
    scenario, rank = path.relative_to(HERE).parts[0], path.name.split("_")[-1].split(".")[0]
    if path.parent.name == "json":
        how = "`_dump_fr_trace_json()` (JSON, no stack frames)"
    elif path.parent.name == "gz":
        how = f"gzip of `{scenario}/nccl_trace_rank_{rank}`"
    else:
        how = "`_dump_fr_trace()` (pickle, protocol 2)"
    return f"- `{path.relative_to(HERE)}`: real, rank {rank} of gen_dumps.py `{scenario}` via {how}"


def write_readme() -> None:
    lines = [
        "# Flight recorder fixtures",
        "",
        "Real dumps from torch 2.13.0+cpu, 4-rank gloo jobs on CPU, made by `gen_dumps.py` (run it from the repo",
        "root with the project venv). Each rank saves the bytes torch's dump writer would write, named as the",
        "writer names them (`nccl_trace_rank_<rank>`). Every job: all_reduce, all_reduce on a [0, 1] subgroup",
        '("pair"), broadcast, then collective #3, a gradient all_reduce that goes wrong like this:',
        "",
        *(f"- `{name}/`: {what}" for name, what in SCENARIOS.items()),
        "",
        "Each rank dumps after the faulty collective returns or times out (2 s), except in `size_mismatch/`, where",
        "each dumps right after enqueueing it, because gloo then kills rank 2 with SIGABRT.",
        "",
        "What gloo dumps look like, unlike NCCL ones: every entry's state stays `scheduled`; `pg_config` holds one",
        "entry under an empty name with a stale member list; `pg_status` counts a timed-out collective as completed.",
        "",
        "One line per file:",
        "",
        *(_origin(p) for p in sorted(HERE.glob("*/**/nccl_trace_rank_*"))),
        "",
        "Dumps built inside tests/engine/test_flight.py (NCCL-shaped, malicious, truncated) are made at test time.",
    ]
    (HERE / "README.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    for name in sys.argv[1:] or SCENARIOS:
        if name not in SCENARIOS:
            raise SystemExit(f"unknown scenario {name!r}; pick from {', '.join(SCENARIOS)}")
        generate(name)
    write_readme()
