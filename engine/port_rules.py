"""The store's bind failure says why the port could not be taken: only "address already in use" is another job (D4).

torch's TCPStore server reports a failed bind or listen with the socket error it got (torch/csrc/distributed/c10d/
socket.cpp: "The server socket has failed to bind to {address} (errno: {n} - {strerror})"; the libuv store of torch
2.4+: "code: -{n}, name: {UV_NAME}, message: {text}"). errno 98 (EADDRINUSE) is a port some other process holds,
which is D4. errno 13 (EACCES: a port below 1024 without root, or a security policy) and errno 99 (EADDRNOTAVAIL:
MASTER_ADDR is not an address of this host) are not, and the same words must not name D4 for them.
"""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy

_CODE = _lazy(r"server socket has failed to (?:bind|listen)[^\n]*?(?:errno: (\d+)|code: -(\d+))")
IN_USE = "98"
MEANING = {"13": "permission denied: ports below 1024 need root (or a security policy refused it)",
           "99": "cannot assign the requested address: MASTER_ADDR is not an address of this host"}


def bind_errno_rule(text: str, file: str) -> list:
    if "server socket has failed to" not in text:
        return []
    from gpudoctor.engine.rules import Verdict
    from gpudoctor.engine.textfind import line_text

    codes = [(m.group(1) or m.group(2), m.start()) for m in _CODE.finditer(text)]
    if not codes or any(code == IN_USE for code, _ in codes):
        return []
    code, at = codes[0]
    line_no = text.count("\n", 0, at) + 1
    why = MEANING.get(code, f"errno {code}, not 98 (address already in use)")
    note = f"line {line_no}: the store could not bind its port, errno {code}: {why}; no other job holds it (not D4)"
    here = Evidence(file, line_no, line_text(text, at).strip(), "rule:bind-errno-not-in-use")
    return [Verdict("D4", "rule:bind-errno-not-in-use", (here,), rule_out=True, note=note)]
