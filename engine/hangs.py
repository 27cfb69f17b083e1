"""Hangs told only by where each rank was stopped (py-spy, faulthandler): a rank-0-only save (D21) or a desync (D19)."""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.rules import Verdict
from gpudoctor.engine.stacks import ProcessStack, collective_of, parse_stacks


def _user(frame) -> bool:
    from gpudoctor.engine.tracebacks import is_user_path

    return is_user_path(frame.file)


def _gated_frame(stack: ProcessStack):
    """The user frame whose function only one rank should run (save, evaluate, log metrics), innermost first."""
    from gpudoctor.engine.gating import is_gated_function

    for frame in stack.frames:
        if is_gated_function(frame.function) and (_user(frame) or "lightning" in frame.file
                                                  or "transformers/trainer" in frame.file):
            return frame
    return None


def _where(stack: ProcessStack) -> str:
    place = collective_of(stack.frames)
    return f"in {place}" if place else f"in {stack.frames[0].function}"


def hang_rules(dumps: dict) -> list[Verdict]:
    """dumps: source name -> (text, rank hint). Needs two or more stopped processes to compare."""
    stacks: list[ProcessStack] = []
    for name, (text, hint) in dumps.items():
        stacks.extend(parse_stacks(text, name, hint))
    if len(stacks) < 2:
        return []
    places = {id(s): collective_of(s.frames) for s in stacks}
    in_collective = [s for s in stacks if places[id(s)] is not None]
    if not in_collective:
        return []
    groups: dict[str | None, list[ProcessStack]] = {}
    for s in stacks:
        groups.setdefault(places[id(s)], []).append(s)
    biggest = max(len(g) for g in groups.values())
    majority = [k for k, g in groups.items() if len(g) == biggest]
    odd = [s for k, g in groups.items() if k not in majority or len(majority) > 1 for s in g]

    def ev(s: ProcessStack, why: str, rule: str) -> Evidence:
        sep = " " if why.startswith(("(", "inside")) else ": "
        return Evidence(s.file, s.line, f"{s.label} stopped {_where(s)}{sep}{why}", rule)

    # one rank (or a few) inside a save/eval/log function while the rest wait in a collective
    gated = [(s, _gated_frame(s)) for s in odd if _gated_frame(s) is not None]
    if gated and len(gated) < len(stacks) and len(groups) > 1:
        rule = "rule:rank-alone-in-gated-function"
        evidence = []
        for s, frame in gated[:3]:
            where = f"{frame.file.replace(chr(92), '/').rsplit('/', 1)[-1]}:{frame.line}"
            inside = "" if frame is s.frames[0] else f"inside {frame.function} "
            evidence.append(ev(s, f"{inside}({where}), a function only rank 0 is meant to run", rule))
        waiting = [s for k in majority for s in groups[k] if s not in (g for g, _ in gated)]
        for s in waiting[:2]:
            evidence.append(ev(s, "waiting for the others", rule))
        return [Verdict("D21", rule, tuple(evidence), score=0.85)]
    named = {k for k in groups if k is not None}
    if len(named) > 1:
        rule = "rule:ranks-in-different-collectives"
        evidence = [ev(g[0], f"{len(g)} process{'es' if len(g) > 1 else ''} here", rule)
                    for k, g in sorted(groups.items(), key=lambda kv: len(kv[1])) if k is not None]
        return [Verdict("D19", rule, tuple(evidence[:4]), score=0.8)]
    return []


# py-spy prints a package's frames relative to its site-packages: "torch/autograd/graph.py"
_LIBRARIES = {"torch", "deepspeed", "accelerate", "transformers", "lightning", "pytorch_lightning", "horovod", "apex",
              "threading.py", "runpy.py", "multiprocessing", "concurrent", "importlib", "site-packages", "dist-packages"}


def _library(frame) -> bool:
    return frame.file.replace("\\", "/").lstrip("./").split("/", 1)[0] in _LIBRARIES


def stopped_at(dumps: dict) -> dict[int, tuple[Evidence, str | None]]:
    """rank -> (the innermost frame of the user's own code in its dump, as a line of the dump; the collective it waits
    in): what the ranks table shows for a stack dump, instead of the dump's last line (`<module>`)."""
    out: dict[int, tuple[Evidence, str | None]] = {}
    for name, (text, hint) in dumps.items():
        for stack in parse_stacks(text, name, hint):
            if stack.rank is None or stack.rank in out:
                continue
            at = next((k for k, f in enumerate(stack.frames) if _user(f) and not _library(f)), None)
            if at is None:
                continue
            frame = stack.frames[at]
            where = f"{frame.function} ({frame.file.replace(chr(92), '/').rsplit('/', 1)[-1]}:{frame.line})"
            out[stack.rank] = (Evidence(name, stack.line + 1 + at, where, "last-line"), collective_of(stack.frames))
    return out
