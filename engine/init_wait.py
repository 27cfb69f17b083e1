"""A log that stops while its process waits for the others to join the process group (D2, as a possible cause).

Launchers and trainers announce that a process has begun joining the group and, once every process has arrived
through the rendezvous store, that the group is formed. A log whose last lines are the first announcement, with
neither the second nor any error after it, shows a process that sat waiting for peers that never came: the other
nodes point at another address or port, or were never started (a SLURM job run without `srun`, a second node
launched as a job of its own). That reading stays a possible cause: the log was maybe only cut there. A log in
which every member announced itself is no such case: they all reached the store (each per-rank file is read alone,
so there the reading stays a guess).

Begun, by the code that prints it:
  Lightning 1.0-1.5 plugins/training_type/ddp.py, ddp_spawn.py: log.info(f"initializing ddp: GLOBAL_RANK: {r},
    MEMBER: {r + 1}/{world_size}"); 1.6-2.x fabric/utilities/distributed.py _init_dist_connection: "Initializing
    distributed: GLOBAL_RANK: ..."; strategies/deepspeed.py: "initializing deepspeed distributed: GLOBAL_RANK: ..."
  torch 1.8-1.13 distributed_c10d.py _store_based_barrier: logger.info("Added key: {} to store for rank: {}")
Formed:
  Lightning: "All DDP processes registered. Starting ddp with {} processes" (1.x), "All distributed processes
    registered. Starting with {} processes" (1.6-2.x)
  torch: "Rank {}: Completed store-based barrier for key:{} with {} nodes."
"""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy

_BEGUN = _lazy(r"(?:initializing ddp|[Ii]nitializing distributed|initializing deepspeed distributed): GLOBAL_RANK: "
               r"(?P<rank>\d+), MEMBER: \d+/(?P<world>\d+)|Added key: store_based_barrier_key:\d+ to store for rank: \d+")
_FORMED = _lazy(r"All (?:DDP|distributed) processes registered|Completed store-based barrier for key")
# anything after the announcement that says the run went on or failed instead of waiting
_WENT_ON = _lazy(r"Traceback|Error\b|error:|Exception|WARN|Killed|SIGTERM|timed? ?out|[Ee]poch|\bstep\b|it/s|s/it|"
                 r"\bloss\b")
TAIL_LINES = 4  # the announcement must be among the file's last non-blank lines
SCORE = 0.5


def _tail(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the text's last TAIL_LINES non-blank lines, read back from its end: a kept log may
    hold 16 MiB, and neither a split of it nor a regex per line is needed."""
    tail: list[tuple[int, str]] = []
    end = len(text)
    while end > 0 and len(tail) < TAIL_LINES:
        start = text.rfind("\n", 0, end) + 1
        line = text[start:end].rstrip("\r")
        if line.strip():
            tail.append((text.count("\n", 0, start) + 1, line))
        end = start - 1
    return tail[::-1]


def waiting_at_init(text: str, file: str) -> tuple[Evidence, ...] | None:
    """The announcement line when the text ends waiting for the group to form; None otherwise."""
    tail = _tail(text)
    for k, (n, line) in enumerate(tail):
        m = _BEGUN.search(line)
        if m is None or (m.group("world") is not None and int(m.group("world")) < 2):
            continue
        if any(_FORMED.search(rest) or _WENT_ON.search(rest) for _, rest in tail[k + 1:]):
            return None
        # every member announced itself in this log: they all reached the store, none waits for a missing one
        from gpudoctor.engine.textfind import lines_with

        members = {int(a.group("rank")): int(a.group("world")) for a in map(_BEGUN.search, (
            found for _, found in lines_with(text, "GLOBAL_RANK: "))) if a and a.group("rank")}
        if members and len(members) >= max(members.values()):
            return None
        return (Evidence(file, n, line.strip(), "hint:waiting-at-init"),)
    return None


def init_wait_rule(text: str, file: str) -> list:
    """A possible D2 for a text that ends waiting for its peers to join the process group."""
    from gpudoctor.engine.rules import Verdict

    found = waiting_at_init(text, file)
    return [Verdict("D2", "hint:waiting-at-init", found, score=SCORE, tier="possible")] if found else []


BLOCK_SLACK = 10  # other lines allowed among one start-up's announcements (warnings, banners)
DUPLICATE_SCORE = 0.85


def duplicate_rank_rule(text: str, file: str) -> list:
    """D2 when one start-up announced the same global ranks several times and the rest never: every node began as
    node 0 (no node rank or task count reached it), so each rank number was taken by one process per node and the
    higher ones by none; the group can never form. A restart announces every rank again, so a log in which all
    members announced themselves, or whose repeats are far apart, is left alone."""
    if "GLOBAL_RANK: " not in text:
        return []
    from gpudoctor.engine.textfind import lines_with

    seen: dict[int, list[tuple[int, int, str]]] = {}  # world size -> [(line number, rank, line)]
    for n, line in lines_with(text, "GLOBAL_RANK: "):
        m = _BEGUN.search(line)
        if m and m.group("rank") is not None and int(m.group("world")) >= 2:
            seen.setdefault(int(m.group("world")), []).append((n, int(m.group("rank")), line))
    for world, found in seen.items():
        counts: dict[int, int] = {}
        for _, rank, _line in found:
            counts[rank] = counts.get(rank, 0) + 1
        times = set(counts.values())
        span = found[-1][0] - found[0][0] + 1
        if len(times) != 1 or min(times) < 2 or len(counts) >= world or span > len(found) + BLOCK_SLACK:
            continue
        (m,) = times
        first, _, line = found[0]
        shown = ", ".join(map(str, sorted(counts)[:8])) + (", ..." if len(counts) > 8 else "")
        note = (f"line {first}: global ranks {shown} of {world} were each announced {m} times and the others "
                f"never: {m} nodes each started as node 0 (the node rank or the tasks per node never reached "
                f"them), so the group could not form")
        from gpudoctor.engine.rules import Verdict

        return [Verdict("D2", "rule:ranks-announced-twice", (Evidence(file, first, line.strip(),
                                                                      "rule:ranks-announced-twice"),),
                        score=DUPLICATE_SCORE, note=note)]
    return []
