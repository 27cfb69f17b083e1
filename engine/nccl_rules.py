"""Evidence from NCCL's own INFO lines: the interface each host picked (MN2) and the collective each process called
at each opCount (D19); and from the c10d watchdog's report of which collective timed out."""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.rules import Verdict
from gpudoctor.engine.textfind import line_at, lines_with


def interface_rule(text: str, file: str) -> list[Verdict]:
    """NCCL told to use loopback, a container/tunnel interface or Docker's default bridge: MN2 when NCCL's lines come
    from two or more hosts, a possible MN2 otherwise (one host's log of a multi-node job cannot show the others)."""
    from gpudoctor.engine.netif import hosts, interface_choices, unreachable

    bad = [(ev, [n for n in names if unreachable(n)]) for ev, names in interface_choices(text, file)]
    bad = [(ev, names) for ev, names in bad if names]
    if not bad:
        return []
    seen_hosts = hosts(text)
    ev, names = bad[0]
    hosts_seen = f"; NCCL lines come from {len(seen_hosts)} hosts" if len(seen_hosts) > 1 else ""
    why = Evidence(ev.file, ev.line, f"{', '.join(dict.fromkeys(names))}: loopback, a virtual device or Docker's "
                                     f"default bridge, which other nodes cannot reach{hosts_seen}", "because")
    evidence = tuple(e for e, _ in bad[:3]) + (why,)
    if len(seen_hosts) > 1:
        return [Verdict("MN2", "rule:nccl-unreachable-interface", evidence, score=0.85)]
    return [Verdict("MN2", "hint:nccl-unreachable-interface", evidence, score=0.5, tier="possible")]


# NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=COLL: one line per collective call, from NCCL's enqueue.cc (2.3-2.2x) and
# RCCL: INFO(NCCL_COLL, "%s: opCount %lx sendbuff %p recvbuff %p count %zi datatype %d op %d root %d comm %p
# [nranks=%d] stream %p", opName, comm->opCount, ...), behind the "host:pid:tid [dev] NCCL INFO " prefix
# (read in two parts: a lazy ".*?" between them made each search a fifth slower on rank logs full of these lines)
_COLL_CALL = _lazy(r"(?P<host>[\w.-]+):(?P<pid>\d+):\d+ \[\d+\] NCCL INFO (?P<op>[A-Za-z]+): opCount (?P<count>[0-9a-f]+) ")
_COLL_COMM = _lazy(r"\bcomm (?P<comm>0x[0-9a-f]+|\d+) \[nranks=(?P<n>\d+)")
_COLL_SIZE = _lazy(r"\bcount (\d+) datatype (\d+)")
_P2P = {"Send", "Recv", "SendRecv"}  # point-to-point calls differ between the two ends by design


def _token_before(line: str, marker: str) -> int:
    """Where the "host:pid:tid" token before "[dev] NCCL INFO" starts (a search from there skips the prefixes a
    regex search would try at every position first); 0 where the line has no marker."""
    k = line.find(marker)
    if k < 0:
        return 0
    return line.rfind(" ", 0, line.rfind(" ", 0, k)) + 1


def coll_desync_rule(text: str, file: str) -> list[Verdict]:
    """Two processes of one job that called different collectives at the same opCount: D19. Only processes whose COLL
    lines name a single communicator count (opCounts of different communicators are unrelated), and only calls whose
    op sets share nothing (calls grouped into one launch share an opCount). The same collective with another element
    count or datatype is a desync too: every rank passes the same count to AllReduce, Broadcast, Reduce, AllGather
    (its send count) and ReduceScatter (its receive count), so two processes that disagree are in different calls."""
    if "opCount" not in text:
        return []
    calls: dict[tuple[str, str], dict[str, tuple[set[str], int, str, set]]] = {}
    comms: dict[tuple[str, str], set[str]] = {}
    sizes: dict[tuple[str, str], str] = {}
    for line_no, line in lines_with(text, "opCount"):
        m = _COLL_CALL.search(line, _token_before(line, " NCCL INFO "))
        c = _COLL_COMM.search(line, m.end()) if m is not None else None
        if c is None or m.group("op") in _P2P:
            continue
        proc = (m.group("host"), m.group("pid"))
        comms.setdefault(proc, set()).add(c.group("comm"))
        sizes[proc] = c.group("n")
        ops, first, first_text, shapes = calls.setdefault(proc, {}).get(m.group("count"), (set(), line_no, line, set()))
        ops.add(m.group("op"))
        z = _COLL_SIZE.search(line, m.end(), c.start())
        if z is not None:
            shapes.add(z.groups())
        calls[proc][m.group("count")] = (ops, first, first_text, shapes)
    procs = [p for p in calls if len(comms[p]) == 1]
    # by opCount, lowest first, the processes (of one communicator size) that made that call: linear in the calls,
    # where comparing every pair of processes costs (processes)^2 x opCounts on a combined 64-rank log
    at: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for proc in procs:
        for count in calls[proc]:
            at.setdefault((sizes[proc], count), []).append(proc)
    for size, count in sorted(at, key=lambda k: (int(k[1], 16), k[0])):
        kinds: dict[frozenset[str], tuple[str, str]] = {}  # each distinct op set, with the first process to show it
        for proc in at[(size, count)]:
            kinds.setdefault(frozenset(calls[proc][count][0]), proc)
        if len(kinds) < 2:  # one collective everywhere: the processes may still disagree on its size
            pair = _other_size(calls, at[(size, count)], count)
        else:
            pair = _disjoint_pair(kinds)
        if pair is None:
            continue
        a, b = pair
        (ops_a, line_a, text_a, shapes_a), (ops_b, line_b, text_b, shapes_b) = calls[a][count], calls[b][count]
        if ops_a == ops_b:
            what = (f"opCount {count}: pid {a[1]} and pid {b[1]} both called {'/'.join(sorted(ops_a))}, with "
                    f"{_shapes(shapes_a)} against {_shapes(shapes_b)}, on a communicator of {size} ranks")
        else:
            what = (f"opCount {count}: pid {a[1]} called {'/'.join(sorted(ops_a))}, pid {b[1]} called "
                    f"{'/'.join(sorted(ops_b))} on a communicator of {size} ranks")
        why = Evidence(file, line_b, what, "because")
        return [Verdict("D19", "rule:nccl-opcount-desync", (
            Evidence(file, line_a, text_a, "rule:nccl-opcount-desync"),
            Evidence(file, line_b, text_b, "rule:nccl-opcount-desync"), why), score=0.85)]
    return []


def _other_size(calls: dict, procs: list, count: str):
    """Two processes whose one collective at this opCount moved disjoint (count, datatype) pairs, or None."""
    by_shapes: dict[frozenset, tuple[str, str]] = {}
    for proc in procs:
        shapes = calls[proc][count][3]
        if shapes:
            by_shapes.setdefault(frozenset(shapes), proc)
    return _disjoint_pair(by_shapes)


def _disjoint_pair(first_of: dict[frozenset, tuple[str, str]]):
    """The first processes of two sets (of ops, or of sizes) that share nothing, or None."""
    seen = list(first_of.items())
    return next(((p, q) for i, (x, p) in enumerate(seen) for y, q in seen[i + 1:] if not x & y), None)


def _shapes(shapes: set) -> str:
    return " / ".join(f"{n} elements of datatype {t}" for n, t in sorted(shapes))


# NCCL's error back-trace: every NCCLCHECK that sees a failure prints INFO "%s:%d -> %d" (__FILE__, __LINE__,
# ncclResult_t; 2.4-2.2x, src/include/checks.h; "%s:%d -> %d (%s)" with strerror where a system call failed), so
# the first line of a thread's chain names the layer that failed
_TRACE = _lazy(r"(?P<who>[\w.-]+:\d+:\d+) \[\d+\] NCCL INFO (?P<file>[\w/.-]+\.(?:cc|cu|h|c)):\d+ -> (?P<res>\d+)")
# innermost file -> (entry, what failing there means), from what each file of NCCL's source does
_LAYER = {
    "misc/socket.cc": ("MN2", "a TCP socket between hosts"), "include/socket.h": ("MN2", "a TCP socket between hosts"),
    "bootstrap.cc": ("MN2", "bootstrap, the TCP rendezvous between ranks"),
    "transport/net_socket.cc": ("MN2", "the socket transport between hosts"),
    "transport/net_socket.cu": ("MN2", "the socket transport between hosts"),
    "transport/nvls.cc": ("MN1", "NVLink SHARP multicast, which needs the NVSwitch fabric manager"),
    "transport/shm.cc": ("D24", "the shared-memory transport between local GPUs, whose buffers live in /dev/shm"),
    "misc/shmutils.cc": ("D24", "creating a shared-memory segment in /dev/shm"),
    "include/shm.h": ("D24", "creating a shared-memory segment in /dev/shm"),
}
# a peer said to have gone away (lower-cased: str.find is many times faster than a case-blind regex on a 1 MB log)
_PEER_GONE = ("closed by remote peer", "reset by peer", "remote process exited", "connection closed by")


def _after_digit(text: str, at: int) -> bool:
    """" -> " right after a digit ("bootstrap.cc:87 -> 3"): a back-trace line, not a channel or ring line
    ("0[0] -> 1[1] via P2P")."""
    return text[at - 1: at].isdigit()


def error_trace_rule(text: str, file: str) -> list[Verdict]:
    """Where NCCL's error back-trace starts: in its socket or bootstrap code a possible MN2 (hosts that cannot reach
    each other over the interface NCCL picked), in its NVLS code a possible MN1, in its shared-memory code a possible
    D24. Not when a peer is said to have gone away: then the socket failed because another rank died first."""
    started: set[str] = set()
    for line_no, line in lines_with(text, " -> ", _after_digit):
        m = _TRACE.search(line)
        if m is None or m.group("who") in started:
            continue
        started.add(m.group("who"))  # a thread's first trace line is where its failure began
        path = m.group("file")
        layer = next((v for k, v in _LAYER.items() if path == k or path.endswith("/" + k)), None)
        if layer is not None:
            lower = text.lower()
            if any(words in lower for words in _PEER_GONE):
                return []
            entry, what = layer
            why = Evidence(file, line_no, f"NCCL's error back-trace starts in {path}: {what} failed "
                                          f"(ncclResult {m.group('res')})", "because")
            return [Verdict(entry, "hint:nccl-error-trace", (Evidence(file, line_no, line, "hint:nccl-error-trace"),
                                                             why), score=0.45, tier="possible")]
    return []


_WATCHDOG_CUT = "collective operation timeout:"
_FIRST_WORK = _lazy(r"^\s*WorkNCCL\(SeqNum=1,")
_TIMEOUT_WORDS = ("collective operation timeout", "Timeout at NCCL work")


# NCCL's init lines give each communicator's size: "ncclCommInitRank comm 0x.. rank 0 nranks 8 cudaDev 0 ..." (2.x,
# init.cc) and "comm 0x.. rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 ..." (2.12+)
_NRANKS = _lazy(r"\brank \d+ n[Rr]anks (\d+)\b")


def world_of_one(text: str) -> bool:
    """Every communicator NCCL reports has a single rank: no peer, no path between GPUs, no one to wait for."""
    if "anks " not in text:  # nranks, nRanks
        return False
    sizes = {m.group(1) for m in _NRANKS.finditer(text)}
    return sizes == {"1"}


def first_collective_rule(text: str, file: str) -> list[Verdict]:
    """The group's first collective (SeqNum=1) timed out and no later one did: the communicator never carried data.

    On one host that points at the path between its GPUs (peer-to-peer blocked by ACS or an IOMMU, a VM, a bad
    NVLink): a possible D25. A watchdog report wrapped after "timeout:" with that first work on the next line also
    rules out MN3, whose signature reads SeqNum on the report's own line and leaves SeqNum=1 out."""
    if "SeqNum=" not in text or not any(word in text for word in _TIMEOUT_WORDS):
        return []
    first = cut = None
    for line_no, line in lines_with(text, "SeqNum="):
        seq = line[line.find("SeqNum=") + 7:].split(",", 1)[0].split(")", 1)[0].strip()
        if seq != "1":
            return []  # a later collective timed out (or ran): the group did carry data
        if first is None and any(word in line for word in _TIMEOUT_WORDS):
            first = (line_no, line)
        if cut is None and _FIRST_WORK.search(line):
            previous = text.split("\n", line_no - 1)[line_no - 2] if line_no > 1 else ""
            if previous.rstrip().endswith(_WATCHDOG_CUT):
                cut = (line_no, line)
                first = first or cut
    if first is None:
        return []
    verdicts = []
    if cut is not None:
        note = (f"{file}: the first collective of the group (SeqNum=1) timed out: the communicator never carried "
                f"data, so look at its set-up and the path between the GPUs (P2P, network interface), not at the "
                f"timeout")
        verdicts.append(Verdict("MN3", "rule:first-collective-timeout",
                                (Evidence(file, cut[0], cut[1], "rule:first-collective-timeout"),), rule_out=True,
                                note=note))
    from gpudoctor.engine.netif import hosts

    if len(hosts(text)) <= 1 and not world_of_one(text):
        why = Evidence(file, first[0], "the group's first collective (SeqNum=1) never completed on one host: the "
                                       "GPUs' peer-to-peer path is the first suspect (try NCCL_P2P_DISABLE=1)",
                       "because")
        verdicts.append(Verdict("D25", "hint:first-collective-timeout",
                                (Evidence(file, first[0], first[1], "hint:first-collective-timeout"), why),
                                score=0.45, tier="possible"))
    return verdicts


# NCCL's debug prefix (src/debug.cc, 2.x: "%s:%d:%d [%d] " with the host name, pid, tid and cudaDev, the device index
# as the process sees it). Several processes on one host, every one on the same index, share one GPU (D3), unless each
# sees only its own GPU (CUDA_VISIBLE_DEVICES per rank, SLURM's --gpus-per-task): then NCCL's init lines
# ("... cudaDev 0 busId 1b000 ...", init.cc) give different bus ids, and nothing is said.
_PREFIX_DEVICE = _lazy(r"(?:^|[\s\]])([\w.-]{1,253}):(\d{1,10}):\d{1,10} \[(\d{1,3})\] NCCL (?:INFO|WARN)")
_BUS_ID = _lazy(r"\bbusId ([0-9a-fA-F]{3,16})\b")
SHARED_DEVICE_SCORE = 0.5


def shared_device_rule(text: str, file: str) -> list[Verdict]:
    """A possible D3 when NCCL's prefixes show two or more processes of one host all on the same CUDA device."""
    if " NCCL " not in text:
        return []
    by_host: dict[str, dict[str, tuple[str, int, str]]] = {}
    for line_no, line in lines_with(text, " NCCL "):
        m = _PREFIX_DEVICE.search(line)
        if m:
            by_host.setdefault(m.group(1), {}).setdefault(m.group(2), (m.group(3), line_no, line))
    for host, pids in by_host.items():
        devices = {device for device, _, _ in pids.values()}
        if len(pids) < 2 or len(devices) != 1:
            continue
        if len(set(_BUS_ID.findall(text))) > 1:
            break  # each process sees its own GPU as device 0 (the bus ids are the whole log's: one look decides)
        first, second = sorted(pids.values(), key=lambda p: p[1])[:2]
        device = devices.pop()
        why = Evidence(file, second[1], f"NCCL's line prefixes show {len(pids)} processes on {host}, every one on "
                                        f"CUDA device {device}: they share one GPU", "because")
        return [Verdict("D3", "hint:processes-share-a-device",
                        (Evidence(file, first[1], first[2], "hint:processes-share-a-device"), why),
                        score=SHARED_DEVICE_SCORE, tier="possible")]
    return []


# NCCL's banner ("NCCL version 2.18.1+cuda12.1", also "NCCL INFO NCCL version ...") and torch's error suffix
# ("..., NCCL version 2.14.3"): each process names the library it loaded
_NCCL_VERSION = _lazy(r"\bNCCL version (\d+\.\d+\.\d+)")


def version_split_rule(text: str, file: str) -> list[Verdict]:
    """D19 ruled out, and a note, when the processes of one job load different NCCL releases: their wire formats
    differ, so "message truncated" or an internal error follows from the split, not from code paths that diverge."""
    if "NCCL version" not in text:
        return []
    first: dict[str, int] = {}
    for m in _NCCL_VERSION.finditer(text):
        first.setdefault(m.group(1), m.start())
    if len(first) < 2:
        return []
    shown = sorted(first, key=first.get)
    lines = [line_at(text, first[v])[0] for v in shown]
    where = ", ".join(f"{v} (line {n})" for v, n in zip(shown, lines))
    note = (f"the processes of this job load different NCCL releases: {where}; releases differ on the wire, so a "
            "truncated message or an internal error follows from the split, not from a collective some rank skipped "
            "(not D19); install one NCCL everywhere (`gpudoctor probe versions` on each node shows which)")
    line_no, line = line_at(text, first[shown[1]])
    return [Verdict("D19", "rule:nccl-versions-differ", (Evidence(file, line_no, line, "rule:nccl-versions-differ"),),
                    rule_out=True, note=note)]
