"""A kept text as the program printed it: what carried the log to the user is taken off once per text, so that
rules which read where a line starts or how far it is indented (tracebacks, stack dumps, progress bars) read
the program's own output.

Taken off: a collector's column before every line (kubectl logs --timestamps or --prefix, a containerd (CRI) log
file, docker compose, Ray's worker prefix, srun --label, pdsh's host, SageMaker's MPI rank, the quote marks of a
log quoted in a reply), each after exactly one separator so that indentation survives; terminal colour codes;
and other printers' tracebacks (rich, IPython) are rewritten in Python's form. Every line stays in place, so
line numbers hold.
"""
from __future__ import annotations

import re

from gpudoctor.engine.display import strip_ansi
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.prefix_rules import COMPOSE, PDSH, POD, QUOTE, RAY, SAGEMAKER, SLURM

_ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
_COLUMNS = {
    "containerd": _lazy(rf"^{_ISO} (?:stdout|stderr) [FP] ", re.MULTILINE),  # containerd / CRI-O file
    "kubectl": _lazy(rf"^{_ISO} ", re.MULTILINE),  # kubectl logs --timestamps, docker logs -t
    # the others as engine/prefix_rules.py reads them on a line
    **{name: _lazy("^" + pattern, re.MULTILINE) for name, pattern in (
        ("compose", COMPOSE), ("ray", RAY), ("srun", SLURM), ("pdsh", PDSH), ("pod", POD), ("sagemaker", SAGEMAKER),
        ("quote", QUOTE))},
}
# columns that say nothing about the run, left out where a line is shown (Ray's worker and srun's task id are kept)
_UNSAID = ("containerd", "kubectl", "compose", "quote")
SAMPLE_LINES = 40  # non-empty lines looked at from the top
SHARE = 0.8  # of which this many must carry the column


def as_printed(text: str) -> str:
    """text with the collector's column cut from every line that has it, or text itself when no column leads most
    of its first lines; terminal colour codes are cut too (a coloured level or exception name is still one), and
    rich's boxed and IPython's tracebacks are rewritten as Python prints them (engine/tbforms.py)."""
    text = strip_ansi(text)
    head = text[: 1 << 15]
    sample = [line for line in head.split("\n")[: SAMPLE_LINES * 4] if line.strip()][:SAMPLE_LINES]
    for column in _COLUMNS.values() if len(sample) >= 2 else ():
        if sum(1 for line in sample if column.match(line)) >= SHARE * len(sample):
            text = column.sub("", text)
            break
    if "Traceback (most recent call last)" in text:
        from gpudoctor.engine.tbforms import has_foreign, plain_tracebacks

        if has_foreign(text):
            text = "\n".join(plain_tracebacks(text.split("\n")))
    return text


def shown(line: str) -> str:
    """A log line as evidence shows it: without a leading collector column that says nothing about the run (a
    kubectl or containerd timestamp, docker compose's service column, a reply's quote marks)."""
    if line[:1] not in "0123456789>" and " | " not in line[:110]:
        return line
    for name in _UNSAID:
        m = _COLUMNS[name].match(line)
        if m is not None and m.end() < len(line):
            return line[m.end():]
    return line
