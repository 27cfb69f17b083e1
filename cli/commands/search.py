"""`gpudoctor search TEXT`: rank entries by how well they match a symptom, an error or a phrase."""
from __future__ import annotations

from gpudoctor.common import fit, load, print_json
from gpudoctor.errors import EXIT_NOTHING, UserError

HELP = "find entries by symptom or error text (typo-tolerant)"
DESCRIPTION = """\
Search the catalogue with the words you would use to describe the failure,
or paste an error line. Typos are tolerated.

examples:
  gpudoctor search "hangs at end of epoch"
  gpudoctor search Address already in use
  gpudoctor search "nccl picks docker0" --json"""

MIN_SCORE = 0.15  # below this a hit shares only a stray word with the query


def add_arguments(parser) -> None:
    parser.add_argument("query", nargs="+", metavar="TEXT", help="what you see; several words are one query")
    parser.add_argument("--limit", "-n", type=int, default=5, metavar="N", help="show at most N results (default 5)")


def run(args, out) -> int:
    query = " ".join(args.query).strip()
    if not query:
        raise UserError("give some words to search for, e.g. gpudoctor search \"hangs at end of epoch\"")
    if args.limit < 1:
        raise UserError("--limit must be at least 1")
    catalog = load(args)
    hits = [h for h in catalog.search_index().search(query, limit=args.limit) if h.score >= MIN_SCORE]
    if args.json:
        print_json(out, {"query": query, "results": [
            {"id": h.id, "title": catalog.entries[h.id].title, "section": catalog.entries[h.id].section,
             "score": h.score, "matched": list(h.matched)} for h in hits]})
        return 0 if hits else EXIT_NOTHING
    if not hits:
        shown = query if len(query) <= 60 else query[:57] + "…"
        out.write(f"Nothing in the catalogue matches {shown!r}.")  # repr: control characters escaped
        out.write("Try other words for what you see, or paste the first error line; gpudoctor list shows everything.")
        return EXIT_NOTHING
    title_w = out.width - 6 - 6 - 2
    for h in hits:
        e = catalog.entries[h.id]
        out.write(f"{out.style(f'{e.id:<6}', 'id')}{h.score:>4.2f}  {fit(e.title, title_w)}")
        summary = fit(e.summary, out.width - 12)
        out.write(" " * 12 + out.style(summary, "dim"))
    out.write(out.style(f"gpudoctor show {hits[0].id} for the whole entry", "dim"))
    return 0
