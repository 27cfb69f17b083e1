"""`gpudoctor list`: every catalogue entry as a table of id, section and title."""
from __future__ import annotations

from gpudoctor.common import fit, load, print_json
from gpudoctor.errors import UserError

HELP = "list catalogue entries"
DESCRIPTION = """\
List the known failures: id, section, whether the cause can show in a log,
title.

examples:
  gpudoctor list
  gpudoctor list --section hangs
  gpudoctor list --json | jq -r '.[].id'"""


def add_arguments(parser) -> None:
    parser.add_argument("--section", "-s", metavar="S", help="only this section (launchers, ddp, fsdp, deepspeed, hangs, multinode, pitfalls, guides, user)")


def _match_section(wanted: str, sections: list[str]) -> str:
    key = wanted.strip().lower().replace("-", "").replace("_", "").replace(" ", "")
    for s in sections:
        if s.replace("-", "") == key or s.rstrip("s") == key.rstrip("s"):
            return s
    raise UserError(f"unknown section {wanted!r}; sections: {', '.join(sections)}")


def run(args, out) -> int:
    from gpudoctor.kb.model import SECTIONS

    catalog = load(args)
    entries = list(catalog)
    if args.section:
        section = _match_section(args.section, list(SECTIONS))
        entries = [e for e in entries if e.section == section]
    if args.json:
        print_json(out, [
            {"id": e.id, "title": e.title, "section": e.section, "log_visibility": e.log_visibility,
             "origin": e.origin, "source": e.source}
            for e in entries
        ])
        return 0
    if not entries:
        out.write("no entries in that section")
        return 1
    title_w = max(20, out.width - 6 - 1 - 12 - 1 - 4 - 1)
    out.write(out.style(f"{'ID':<6} {'SECTION':<12} {'LOG':<4} TITLE", "bold"))
    for e in entries:
        mark = "yes" if e.log_visibility == "shows" else "-"
        ident = e.id + ("*" if e.origin == "user" else "")
        section = fit(e.section, 12)
        out.write(f"{out.style(f'{ident:<6}', 'id')} {section:<12} {mark:<4} {fit(e.title, title_w)}")
    if any(e.origin == "user" for e in entries):
        out.write(out.style("* from your own runbooks (--kb, GPUDOCTOR_KB)", "dim"))
    out.write(out.style(f"{len(entries)} entries · gpudoctor show ID for one", "dim"))
    return 0
