"""The store's bind failure says why the port could not be taken: only "address already in use" is another job (D4).

torch's TCPStore server reports a failed bind or listen with the socket error it got (torch/csrc/distributed/c10d/
socket.cpp: "The server socket has failed to bind to {address} (errno: {n} - {strerror})"; the libuv store of torch
2.4+: "code: -{n}, name: {UV_NAME}, message: {text}"). errno 98 (EADDRINUSE) is a port some other process holds,
which is D4. errno 13 (EACCES: a port below 1024 without root, or a security policy) and errno 99 (EADDRNOTAVAIL:
MASTER_ADDR is not an address of this host) are not, and the same words must not name D4 for them.

The same words from another program's server are not torch's port either: ZeroMQ's "Address already in use" (pyzmq's
zmq.error.ZMQError, raised from zmq/sugar/socket.py bind) is a Jupyter kernel (ipykernel's kernelapp binding its
shell, iopub and heartbeat ports) or another ZeroMQ service starting twice, as a notebook does when a training
library re-runs its kernel command once per rank. Where no torch store or launcher line says a rendezvous port was
taken too, D4 is ruled out.
"""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy

_IN_USE = _lazy(r"errno: 98\b|code: -98\b|EADDRINUSE|[Aa]ddress already in use")
# another reason on a bind failure's line: an errno or libuv code, or its text where a version printed only that
_OTHER = _lazy(r"errno: (\d+)|code: -(\d+)|(Permission denied|EACCES)|(Cannot assign requested address|EADDRNOTAVAIL)")
WORDS = {"Permission denied": "13", "EACCES": "13", "Cannot assign requested address": "99", "EADDRNOTAVAIL": "99"}
_ZMQ_IN_USE = _lazy(r"\bZMQError: Address already in use")
# torch's own bind failures and the launchers' echo of the port: any of these keeps D4 open
_TORCH_PORT = _lazy(r"server socket has failed|TCPStore|c10d|MASTER_PORT|master_port|torchrun|rendezvous|"
                    r"init_process_group|--main_process_port")
MEANING = {"13": "permission denied: ports below 1024 need root (or a security policy refused it)",
           "99": "cannot assign the requested address: MASTER_ADDR is not an address of this host"}


def bind_errno_rule(text: str, file: str) -> list:
    if "server socket has failed to" not in text or _IN_USE.search(text):
        return []
    from gpudoctor.engine.rules import Verdict
    from gpudoctor.engine.textfind import lines_with

    found = None
    for n, line in lines_with(text, "server socket has failed to"):
        m = _OTHER.search(line)
        if m is not None:
            found = (n, line, m.group(1) or m.group(2) or WORDS[m.group(3) or m.group(4)])
            break
    if found is None:
        return []
    line_no, line, code = found
    why = MEANING.get(code, f"errno {code}, not 98 (address already in use)")
    note = f"line {line_no}: the store could not bind its port, errno {code}: {why}; no other job holds it (not D4)"
    here = Evidence(file, line_no, line.strip(), "rule:bind-errno-not-in-use")
    return [Verdict("D4", "rule:bind-errno-not-in-use", (here,), rule_out=True, note=note)]


def zmq_in_use_rule(text: str, file: str) -> list:
    """D4 ruled out when the port in use is a ZeroMQ socket's (a Jupyter kernel's) and no torch port shows."""
    if "ZMQError" not in text:
        return []
    m = _ZMQ_IN_USE.search(text)
    if m is None or _TORCH_PORT.search(text):
        return []
    from gpudoctor.engine.rules import Verdict
    from gpudoctor.engine.textfind import line_at

    line_no, line = line_at(text, m.start())
    kernel = "ipykernel" in text or "jupyter" in text.lower()
    whose = "a Jupyter kernel's ZeroMQ socket" if kernel else "a ZeroMQ socket's"
    note = (f"line {line_no}: the port already in use is {whose}, not torch's rendezvous port; a notebook kernel "
            "started once more (per rank) collides with itself (not D4)")
    here = Evidence(file, line_no, line.strip(), "rule:zmq-port-not-rendezvous")
    return [Verdict("D4", "rule:zmq-port-not-rendezvous", (here,), rule_out=True, note=note)]


# the store's host waiting for the ranks that should join it (torch/csrc/distributed/c10d/TCPStore.cpp waitForWorkers)
_WAITING = _lazy(r"waiting for clients\. \d+/\d+ clients joined")
_FAILED_LISTEN = _lazy(r"server socket has failed to (?:listen on any local network address|bind)")


def second_rank_zero_rule(texts: dict[str, str]) -> list:
    """D1, and not D4, when one input's process hosts the store and waits for clients while another input's process
    could not bind the store's port because it is in use: both were started as rank 0 (RANK is not set per process),
    and the port is held by the job's own store, not by a second job. A new port for one of them splits the job."""
    waiting = next(((name, t) for name, t in texts.items() if "clients joined" in t and _WAITING.search(t)), None)
    if waiting is None:
        return []
    for name, text in texts.items():
        if name == waiting[0] or "server socket has failed to" not in text:
            continue
        m = _FAILED_LISTEN.search(text)
        if m is None:
            continue
        from gpudoctor.engine.textfind import line_at

        line_no, line = line_at(text, m.start())
        if not _IN_USE.search(line):
            continue
        from gpudoctor.engine.rules import Verdict

        wait_no, wait_line = line_at(waiting[1], _WAITING.search(waiting[1]).start())
        note = (f"{name} could not bind the store's port while {waiting[0]} hosts the store and waits for its clients: "
                "both processes were started as rank 0 (RANK is not set per process); a new port for one would split "
                "the job, not free it (not D4)")
        here = Evidence(name, line_no, line.strip(), "rule:second-rank-zero")
        host = Evidence(waiting[0], wait_no, wait_line.strip(), "rule:second-rank-zero")
        return [Verdict("D1", "rule:second-rank-zero", (here, host), note=note),
                Verdict("D4", "rule:second-rank-zero", (here,), rule_out=True, note=note)]
    return []
