"""Helpers shared by commands: load the catalogue once, report its problems, print JSON."""
from __future__ import annotations



def load(args):
    """The catalogue for this run; broken files are reported on stderr and never hide the rest."""
    from gpudoctor.kb.catalog import load_catalog

    catalog = load_catalog(getattr(args, "kb", None))
    err = getattr(args, "err", None)
    if err is not None and catalog.problems and not getattr(args, "quiet", False):
        from gpudoctor.term import sanitize

        for problem in catalog.problems:
            err.write(f"{err.style('gpudoctor: warning:', 'yellow')} {sanitize(str(problem))}")
    return catalog


def print_json(out, payload) -> None:
    import json

    out.write(json.dumps(payload, indent=2, ensure_ascii=False))


def fit(text: str, width: int) -> str:
    """Cut text to a width, marking the cut."""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def fit_middle(text: str, width: int) -> str:
    """Cut text to a width in its middle: the start and the end (a file name, a line count) stay."""
    if len(text) <= width:
        return text
    keep = max(0, width - 1)
    tail = min(keep // 2 + 12, keep)
    return text[: keep - tail] + "…" + text[len(text) - tail:]
