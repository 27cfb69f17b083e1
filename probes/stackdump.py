"""Where each rank of a running job is stopped: find the training processes on this node and dump their Python
stacks with py-spy, which pauses a live process for an instant to read it and changes nothing in it.

A hung job's only evidence is often the frame each rank waits in (a rank-0-only save while the others sit in
all_reduce is D21; ranks in different collectives, D19). The dumps are written as files the diagnosis reads.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpudoctor.engine.display import strip_ansi
from gpudoctor.kb.record import record
from gpudoctor.probes import procfs

# the variables launchers give each rank: torchrun / deepspeed / accelerate, then MPI (Horovod, mpirun), then srun.
# srun's SLURM_PROCID is also in the environment of a torchrun agent that srun started (one per node), and of its
# workers: it names a rank only where no process here has a torch or MPI rank (srun starting the ranks itself).
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
SCHEDULER_ONLY = ("SLURM_PROCID",)
DUMP_TIMEOUT_S = 20.0
PARALLEL = 8
ERROR_CHARS = 300


@record(frozen=True)
class TrainingProcess:
    pid: int
    rank: int | None  # the global rank its launcher gave it
    local_rank: int | None
    command: str  # its command line, for the user to recognise it
    job: str | None = None  # what its launcher says of the job it belongs to (rendezvous, master, scheduler job)

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"process {self.pid}"


@record(frozen=True)
class StackDump:
    process: TrainingProcess
    text: str | None  # py-spy's dump; None when it failed
    error: str | None = None


def _first_int(env: dict[str, str], names) -> int | None:
    for name in names:
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


# what tells one job's ranks from another's on a shared node: the rendezvous, the master's address, the scheduler's job
JOB_VARS = ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID", "OMPI_MCA_ess_base_jobid",
            "PMIX_NAMESPACE")


def job_of(env: dict[str, str]) -> str | None:
    """A short name for the job a rank belongs to, from its launcher's variables; None when it has none of them."""
    parts = [f"{name}={env[name]}" for name in JOB_VARS if env.get(name, "").strip()]
    return " ".join(parts) or None


def jobs(processes: list[TrainingProcess]) -> dict[str | None, list[TrainingProcess]]:
    """The processes by job, in the order their first rank was found."""
    out: dict[str | None, list[TrainingProcess]] = {}
    for p in processes:
        out.setdefault(p.job, []).append(p)
    return out


def _is_python(argv: list[str]) -> bool:
    return bool(argv) and os.path.basename(argv[0]).startswith(("python", "pypy"))


def find_training_processes(proc_root: str = "/proc") -> list[TrainingProcess]:
    """Python processes on this machine whose environment gives them a rank, one per rank: a data-loader worker
    (a child with its parent's rank) is left out. Ordered by rank, then pid. Read from /proc: none without it
    (macOS), where the ranks are named with --pid."""
    proc = Path(proc_root)
    try:
        pids = [int(p.name) for p in proc.iterdir() if p.name.isdigit()]
    except OSError:
        return []
    skip = procfs.ancestors(os.getpid(), proc)  # gpudoctor run from inside the job's environment is not a rank
    found: dict[int, tuple[TrainingProcess, int | None]] = {}
    scheduler_only: set[int] = set()
    for pid in pids:
        if pid in skip:
            continue
        argv = procfs.command(pid, proc)
        if not _is_python(argv):
            continue
        env = procfs.environ(pid, proc)
        if env is None:
            continue
        rank = _first_int(env, RANK_VARS)
        if rank is None:
            continue
        if _first_int(env, [v for v in RANK_VARS if v not in SCHEDULER_ONLY]) is None:
            scheduler_only.add(pid)
        found[pid] = (TrainingProcess(pid, rank, _first_int(env, LOCAL_RANK_VARS), " ".join(argv), job_of(env)),
                      procfs.parent(pid, proc))
    if len(scheduler_only) < len(found):  # torch or MPI ranks here: srun's own tasks are their launchers
        found = {pid: v for pid, v in found.items() if pid not in scheduler_only}
    ranks = [p for pid, (p, parent) in found.items()
             if not (parent in found and found[parent][0].rank == p.rank)]
    return sorted(ranks, key=lambda p: (p.rank if p.rank is not None else 1 << 30, p.pid))


def processes_by_pid(pids: list[int], proc_root: str = "/proc") -> list[TrainingProcess]:
    """The named processes, with the rank their environment gives when it can be read. Raises ValueError for a
    pid that is not a running process."""
    proc = Path(proc_root)
    chosen = []
    for pid in pids:
        exists = (proc / str(pid)).is_dir() if proc.is_dir() else _running(pid)  # no /proc (macOS): ask the kernel
        if not exists:
            raise ValueError(f"no process {pid} on this machine")
        env = procfs.environ(pid, proc) or {}
        chosen.append(TrainingProcess(pid, _first_int(env, RANK_VARS), _first_int(env, LOCAL_RANK_VARS),
                                      " ".join(procfs.command(pid, proc))))
    return chosen


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it exists
        pass
    return True


def py_spy() -> str | None:
    """py-spy on PATH, else beside this interpreter (a venv that was never activated)."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def dump_stack(pyspy: str, process: TrainingProcess, timeout: float = DUMP_TIMEOUT_S) -> StackDump:
    """py-spy's dump of one process; a failure (gone, no permission, timeout) is named, never raised."""
    try:
        done = subprocess.run([pyspy, "dump", "--pid", str(process.pid)], capture_output=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return StackDump(process, None, f"py-spy did not finish in {timeout:g} s")
    except OSError as exc:
        return StackDump(process, None, f"could not run py-spy: {exc}")
    out = strip_ansi(done.stdout.decode(errors="replace"))
    if done.returncode != 0 or not out.strip():
        lines = [line.strip() for line in strip_ansi(done.stderr.decode(errors="replace")).splitlines() if line.strip()]
        # its first line says what failed, and a "Caused by:" list why ("0: Permission denied (os error 13)"); a
        # Rust backtrace may follow ("Stack backtrace:")
        err = lines[0].removeprefix("Error: ") if lines else f"py-spy exited with code {done.returncode}"
        causes = []
        if "Caused by:" in lines:
            for line in lines[lines.index("Caused by:") + 1:]:
                if line.startswith("Stack backtrace"):
                    break
                causes.append(line.split(": ", 1)[1] if line[:1].isdigit() and ": " in line else line)
        if causes:
            err = f"{err.removesuffix(' Check that the process is running.').rstrip('.')}: {'; '.join(causes)}"
        if "permission" in err.lower():
            err += (" (py-spy needs the process's own user or root, with kernel.yama.ptrace_scope=0 or "
                    "CAP_SYS_PTRACE: in a container, --cap-add SYS_PTRACE)")
        return StackDump(process, None, err[:ERROR_CHARS])
    return StackDump(process, out)


def dump_stacks(pyspy: str, processes: list[TrainingProcess], timeout: float = DUMP_TIMEOUT_S) -> list[StackDump]:
    """Every process dumped at about the same moment (in parallel), in the given order."""
    if not processes:
        return []
    with ThreadPoolExecutor(max_workers=min(PARALLEL, len(processes))) as pool:
        return list(pool.map(lambda p: dump_stack(pyspy, p, timeout), processes))


def file_name(process: TrainingProcess) -> str:
    """The dump's file name; the diagnosis reads the rank off it."""
    return f"rank{process.rank}.py-spy.txt" if process.rank is not None else f"pid{process.pid}.py-spy.txt"


def new_folder(given: str | None = None) -> Path:
    """The folder the dumps go to, created: the one given (new, or empty; "{host}" in it becomes this machine's
    name, for one command run on every node) or gpudoctor-stacks-<host>-<time> here. Raises ValueError, saying
    why, for a path that holds files or cannot be made: dumps never go over files."""
    import socket

    host = socket.gethostname().split(".")[0] or "host"
    name = given.replace("{host}", host) if given else f"gpudoctor-stacks-{host}-{time.strftime('%Y%m%d-%H%M%S')}"
    folder = Path(name)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ValueError(f"{folder}: exists and is not an empty folder; dumps are never written over files")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{folder}: cannot create it: {exc.strerror or exc}") from None
    return folder


def save(folder: Path, dumps: list[StackDump]) -> list[tuple[StackDump, Path]]:
    """Write each dump that was taken as its own file (created, never replaced); (dump, file) pairs, in order."""
    written = []
    for dump in dumps:
        if dump.text is None:
            continue
        path = folder / file_name(dump.process)
        if path.exists():  # two processes with one rank (two jobs on the node): keep both
            path = folder / f"{path.name.split('.', 1)[0]}-pid{dump.process.pid}.py-spy.txt"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(dump.text)
        written.append((dump, path))
    return written
