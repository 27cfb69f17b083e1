"""`gpudoctor show ID`: one catalogue entry, rendered for the terminal, as Markdown or as JSON."""
from __future__ import annotations

from gpudoctor.common import load, print_json
from gpudoctor.errors import UserError

HELP = "show one entry: symptoms, cause, fix, references"
DESCRIPTION = """\
Show catalogue entries in full. Ids are forgiving: d8, D08 and D8 are the same.

examples:
  gpudoctor show D8
  gpudoctor show mn3 --markdown > mn3.md
  gpudoctor show checklist"""


def add_arguments(parser) -> None:
    parser.add_argument("ids", nargs="+", metavar="ID", help="entry id, e.g. D8 or MN3")
    parser.add_argument("--markdown", "--md", action="store_true", help="print Markdown (for issue trackers, docs)")


def run(args, out) -> int:
    catalog = load(args)
    entries = []
    for wanted in args.ids:
        entry = catalog.get(wanted)
        if entry is None:
            near = catalog.closest(wanted)
            hint = ", ".join(f"{e.id} ({e.title})" for e in near)
            raise UserError(f"no entry {wanted!r}" + (f"; closest: {hint}" if hint else "") + "\n"
                            "  gpudoctor list shows every id; gpudoctor search TEXT finds by symptom")
        entries.append(entry)
    if args.json:
        from gpudoctor.kb.model import entry_to_dict

        payload = [entry_to_dict(e) for e in entries]
        print_json(out, payload[0] if len(payload) == 1 else payload)
        return 0
    for n, entry in enumerate(entries):
        if n:
            out.write("")
        if args.markdown:
            out.stream.write(catalog.markdown(entry))
            continue
        from gpudoctor.mdterm import TermRenderer

        encoding = (getattr(out.stream, "encoding", None) or "utf-8").lower()
        renderer = TermRenderer(out.width, out.style, unicode=encoding.startswith("utf"))
        out.write("\n".join(renderer.render(catalog.blocks(entry))))
    return 0
