"""Read where each stopped process was: py-spy dumps and faulthandler dumps, one stack per process."""
from __future__ import annotations

from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.kb.record import record

_PYSPY_PROCESS = _lazy(r"^Process (\d+): (.*)$")
_PYSPY_THREAD = _lazy(r"^Thread (?:0x)?[0-9A-Fa-f]+ \((?:idle|active|gil)[^)]*\)(?:: \"([^\"]*)\")?")
_PYSPY_FRAME = _lazy(r"^\s{2,}(\S.*?) \(([^()]+?):(\d+)\)\s*$")
_FAULT_THREAD = _lazy(r"^(Current thread|Thread) 0x[0-9A-Fa-f]+ \(most recent call first\):")
_FAULT_FRAME = _lazy(r'^\s*File "([^"]+)", line (\d+) in (\S+)')
_RANK_IN_CMD = _lazy(r"(?:--local[-_]rank[= ]|\bRANK=|\brank[= ])(\d+)")
HINTS = ("(most recent call first)", " (idle)", " (active)")


@record(frozen=True)
class StackFrame:
    function: str
    file: str
    line: int


@record(frozen=True)
class ProcessStack:
    """The stack of one process's most telling thread, innermost frame first."""

    label: str  # "rank 1", or the process id / position when no rank is known
    rank: int | None
    frames: tuple[StackFrame, ...]
    file: str  # the input it came from
    line: int  # 1-based line of the thread header


def looks_like_dump(data: str) -> bool:
    return any(h in data for h in HINTS)


def is_pyspy_dump(text: str) -> bool:
    """The whole text is what `py-spy dump` writes ("Process N: cmd", "Python v3.x (path)", threads): a stack and
    nothing else, whose words say nothing of a cause (the hang rules read its frames)."""
    head = [line for line in text[:4096].splitlines() if line.strip()][:2]
    return len(head) == 2 and bool(_PYSPY_PROCESS.match(head[0])) and head[1].startswith("Python v")


def parse_stacks(text: str, name: str, rank_hint: int | None = None) -> list[ProcessStack]:
    """One stack per process in a dump: the thread stopped in a collective if any, else the main thread."""
    from gpudoctor.engine.prefix import parse_prefix

    processes: list[dict] = []  # {"key", "rank", "threads": [(line, is_main, [frames])]}
    current = None
    thread = None

    def process_for(key, rank) -> dict:
        for proc in processes:
            if proc["key"] == key:
                return proc
        proc = {"key": key, "rank": rank, "threads": []}
        processes.append(proc)
        return proc

    for no, raw in enumerate(text.splitlines(), 1):
        p = parse_prefix(raw)
        body = p.body.rstrip()
        m = _PYSPY_PROCESS.match(body)
        if m:
            cmd_rank = _RANK_IN_CMD.search(m.group(2))
            rank = p.rank if p.rank is not None else (int(cmd_rank.group(1)) if cmd_rank else rank_hint)
            current = process_for(("pyspy", m.group(1)), rank)
            thread = None
            continue
        m = _PYSPY_THREAD.match(body.strip())
        if m:
            if current is None or (p.rank is not None and current["rank"] != p.rank):
                current = process_for(("prefix", p.rank), p.rank if p.rank is not None else rank_hint)
            thread = [no, (m.group(1) or "") == "MainThread", []]
            current["threads"].append(thread)
            continue
        m = _FAULT_THREAD.match(body.strip())
        if m:
            rank = p.rank if p.rank is not None else rank_hint
            if current is None or current["key"][0] != "fault" or current["rank"] != rank or \
                    any(t[1] for t in current["threads"]):  # a "Current thread" closes one process's dump
                current = process_for(("fault", rank, no) if rank is None else ("fault", rank), rank)
            thread = [no, m.group(1) == "Current thread", []]
            current["threads"].append(thread)
            continue
        if thread is None:
            continue
        m = _PYSPY_FRAME.match(body) or None
        if m:
            thread[2].append(StackFrame(m.group(1).strip(), m.group(2), int(m.group(3))))
            continue
        m = _FAULT_FRAME.match(body)
        if m:
            thread[2].append(StackFrame(m.group(3), m.group(1), int(m.group(2))))
            continue
        if body.strip():
            thread = None
    out = []
    for k, proc in enumerate(processes):
        threads = [t for t in proc["threads"] if t[2]]
        if not threads:
            continue
        chosen = next((t for t in threads if collective_of(t[2]) is not None), None) \
            or next((t for t in threads if t[1]), threads[0])
        rank = proc["rank"]
        label = f"rank {rank}" if rank is not None else f"process {k + 1}"
        out.append(ProcessStack(label, rank, tuple(chosen[2]), name, chosen[0]))
    return out


COLLECTIVES = {
    "barrier", "monitored_barrier", "all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor",
    "_all_gather_base", "broadcast", "broadcast_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor",
    "_reduce_scatter_base", "gather", "gather_object", "scatter", "scatter_object_list", "all_to_all",
    "all_to_all_single", "send", "recv", "isend", "irecv", "wait",
}


# autograd's entry into the C++ engine: under DDP a rank stopped here waits for the gradient all-reduce the reducer
# launches from its hooks (py-spy shows no native frames, so the wait looks like backward itself)
BACKWARD = {"_engine_run_backward", "run_backward"}
GRADIENT_ALL_REDUCE = "backward (DDP's gradient all_reduce)"


def collective_of(frames) -> str | None:
    """The collective an innermost-first stack is waiting in (torch.distributed or deepspeed.comm), or autograd's
    backward, where a DDP rank waits for the gradient all-reduce."""
    for f in frames:
        path = f.file.replace("\\", "/")
        if f.function in COLLECTIVES and ("distributed" in path or "deepspeed/comm" in path or "/comm/" in path):
            return f.function
        if f.function in BACKWARD and "autograd" in path:
            return GRADIENT_ALL_REDUCE
    return None
