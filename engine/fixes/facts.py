"""What a diagnosed log gives away for filling a fix: the port, the interface, the world size, the command."""
from __future__ import annotations

import os
import re

HEAD_BYTES = 256 << 10
MAX_FILES = 64
_CMD = re.compile(r"^(?:\$|\+|#)?\s*((?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:torchrun|accelerate launch|deepspeed|python3?(?:\.\d+)?)"
                  r"\s+\S.*)$")
_CONTINUED = re.compile(r"[ \t]*\\\r?\n[ \t]*")
_PORT_STRICT = re.compile(r"(?:\bport[:= ]+|MASTER_PORT=|--master[-_]port[= ])(\d{2,5})\b", re.I)
_NCCL_IF = re.compile(r"NCCL INFO (?:Bootstrap|NET/Socket|NET) ?: Using (?:interface )?(?:\[\d+\])?([A-Za-z][\w.-]*):")
_VIRTUAL_IF = re.compile(r"^(docker|virbr|veth|br-|lo$|cni|flannel|cali)")
# DeepSpeed's batch assertion names the world size last: "... * world_size 256 != 8 * 4 * 4" (train batch first)
_WORLD = [re.compile(r"\bworld_size \d+ != \d+ \* \d+ \* (\d+)"),
          re.compile(r"\bworld[_ ]size[=: ]+(\d+)(?! !=)", re.I), re.compile(r"\bnranks (\d+)"),
          re.compile(r"\bdist_world_size=(\d+)")]
# a line that reports a GPU's hardware fault (MN8): the host and NCCL device in its prefix say which GPU to leave out
_GPU_FAULT = re.compile(r"uncorrectable ECC error|fallen off the bus|GPU is lost|NVRM: Xid")
_ADDR = re.compile(r"(?:MASTER_ADDR=|--master[-_]addr[= ]|--rdzv[-_]endpoint[= ])([\w.-]+)")
_NNODES = re.compile(r"--nnodes[= ](\d+)")
# the rule's own account of a step as long as the timeout (engine/slow_step.py): "... still running after 29:55
# (383700/433643 [29:55<03:25), ..."
_SLOW_BAR = re.compile(r"a progress bar still running after .*\[((?:\d+:)?\d{1,2}:\d\d)<((?:\d+:)?\d{1,2}:\d\d)")


def _heads(paths) -> list[str]:
    files: list[str] = []
    for path in paths or ():
        if os.path.isdir(path):
            for root, _dirs, names in os.walk(path):
                files += [os.path.join(root, n) for n in sorted(names)]
        elif os.path.isfile(path):
            files.append(path)
    texts = []
    for path in files[:MAX_FILES]:
        try:
            with open(path, "rb") as fh:
                head = fh.read(HEAD_BYTES)
        except OSError:
            continue
        if b"\0" not in head[:4096]:
            texts.append(head.decode("utf-8", "replace"))
    return texts


def facts_from_text(texts, evidence=()) -> dict:
    facts: dict = {}
    virtual: list[str] = []
    for line in evidence:
        if _GPU_FAULT.search(line) and not {"bad_host", "bad_gpu"} & set(facts):
            from gpudoctor.engine.prefix import parse_prefix

            prefix = parse_prefix(line)
            if prefix.host:
                facts["bad_host"] = prefix.host
            if prefix.device is not None:
                facts["bad_gpu"] = prefix.device
        m = _PORT_STRICT.search(line)
        if m and 0 < int(m.group(1)) < 65536:
            facts.setdefault("port", int(m.group(1)))
        m = _SLOW_BAR.search(line)
        if m:  # MN3's slow step: a timeout half as long again as the whole step (elapsed + remaining), in half hours
            from gpudoctor.engine.slow_step import clock_seconds

            step = clock_seconds(m.group(1)) + clock_seconds(m.group(2))
            facts.setdefault("timeout_minutes", max(60, -(-step * 3 // 2 // 1800) * 30))
    for text in texts:
        if "cmd" not in facts:
            for line in _CONTINUED.sub(" ", text).splitlines():  # a command wrapped with backslashes is one line
                m = _CMD.match(line.strip())
                if m and (".py" in m.group(1) or "-m " in m.group(1)):
                    facts["cmd"] = m.group(1).strip()
                    break
        for line in text.splitlines():
            m = _NCCL_IF.search(line)
            if m and _VIRTUAL_IF.match(m.group(1)) and m.group(1) not in virtual:
                virtual.append(m.group(1))  # NCCL took a loopback, bridge or tunnel: exclude them all
            if "port" not in facts:
                m = _PORT_STRICT.search(line)
                if m and 0 < int(m.group(1)) < 65536:
                    facts["port"] = int(m.group(1))
            if "world_size" not in facts:
                for pattern in _WORLD:
                    m = pattern.search(line)
                    if m and int(m.group(1)) > 0:
                        facts["world_size"] = int(m.group(1))
                        break
            if "master_addr" not in facts:
                m = _ADDR.search(line)
                if m and m.group(1) not in ("localhost", "127.0.0.1"):
                    facts["master_addr"] = m.group(1)
            if "nnodes" not in facts:
                m = _NNODES.search(line)
                if m:
                    facts["nnodes"] = int(m.group(1))
    if virtual:
        facts["interface"] = "^" + ",".join(sorted(set(virtual) | {"lo", "docker0"}))
    return facts


def split_params(text: str) -> list[str]:
    """The TUI's params field as KEY=VALUE items: split at spaces outside brackets and quotes, so
    `sample_input=torch.zeros(1, 32, device=dev) port=29500` is two items; a value in matching quotes loses them, as
    the shell would take them off `--param`."""
    items, depth, quote, start = [], 0, "", 0
    for k, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch.isspace() and depth == 0:
            items.append(text[start:k])
            start = k + 1
    items.append(text[start:])
    out = []
    for item in (i.strip() for i in items):
        key, sep, value = item.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if item:
            out.append(f"{key}{sep}{value}")
    return out


def parse_params(items) -> dict:
    """Facts the user gives as KEY=VALUE (fix --param, the TUI's params field); FixError names a bad one."""
    from gpudoctor.engine.fixes.errors import FixError
    from gpudoctor.kb.model import FIX_FACTS

    facts = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise FixError(f"--param {item!r}: expected KEY=VALUE")
        if key not in FIX_FACTS:
            raise FixError(f"--param {key}: unknown (known: {', '.join(FIX_FACTS)})")
        value = value.strip()
        check = _CHECKS.get(key)
        if check is not None and not re.fullmatch(check[0], value):
            raise FixError(f"--param {key}={value!r}: expected {check[1]}")
        if key in _PORTS and not 0 < int(value) < 65536:
            raise FixError(f"--param {key}={value}: expected a port from 1 to 65535")
        if key in _EXPRESSIONS and not _one_expression(value):
            raise FixError(f"--param {key}={value!r}: expected one Python expression, e.g. torch.zeros(1, 32)")
        facts[key] = int(value) if value.isdigit() else value
    return facts


# the values that end up in code, a config or a command line: each checked before it is written anywhere
_POSITIVE = r"0*[1-9]\d*"
_CHECKS = {
    "port": (r"\d{1,5}", "a port number"),
    "free_port": (r"\d{1,5}", "a port number"),
    "rdzv_port": (r"\d{1,5}", "a port number"),
    "world_size": (_POSITIVE, "a whole number of processes, 1 or more"),
    "nproc": (rf"{_POSITIVE}|gpu|auto", "a whole number of processes per node, or gpu"),
    "nnodes": (rf"{_POSITIVE}(?::{_POSITIVE})?", "a number of nodes, or MIN:MAX"),
    "timeout_minutes": (r"0*[1-9]\d{0,5}", "a whole number of minutes, 1 or more"),
    "zero_stage": (r"[0-3]", "a ZeRO stage: 0, 1, 2 or 3"),
    "elastic_timeout": (_POSITIVE, "a whole number of seconds, 1 or more"),
}
_PORTS = {"port", "free_port", "rdzv_port"}
_EXPRESSIONS = {"sample_input"}  # written into the script as code: one expression on one line, nothing else


def _one_expression(value: str) -> bool:
    import ast

    if not value or "\n" in value or "\r" in value:
        return False
    try:
        ast.parse(value, mode="eval")
    except SyntaxError:
        return False
    return True


def facts_from_diagnosis(diagnosis, logs=None) -> dict:
    """Facts for fix planning from a diagnosis (its evidence and ranks) and the heads of its log files."""
    evidence = [ev.text for f in getattr(diagnosis, "findings", ()) for ev in f.evidence]
    facts = facts_from_text(_heads(logs), evidence)
    ranks = [r for r in getattr(diagnosis, "ranks", ()) if getattr(r, "rank", None) is not None]
    if "world_size" not in facts and len(ranks) > 1:
        facts["world_size"] = len(ranks)
    return facts


_NOT_DATA_IF = re.compile(r"^(lo$|docker|virbr|veth|br-|ifb|tun|tap|cni|flannel|cali|wg|zt|dummy)")


def interface_from_nic(figures: dict) -> str | None:
    """The data interface to name for NCCL from the nic probe's figures: up, not virtual, fastest first."""
    interfaces = figures.get("interfaces") or {}
    up = [name for name, info in interfaces.items()
          if (info or {}).get("state") in ("up", "unknown") and not _NOT_DATA_IF.match(name)]
    if not up:
        return None
    return max(up, key=lambda n: (interfaces[n].get("speed_mbps") or 0, n in (figures.get("selected") or ())))
