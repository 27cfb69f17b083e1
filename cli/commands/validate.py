"""`gpudoctor validate`: check catalogue files (built-in and your runbooks) and name every problem."""
from __future__ import annotations

import json

from gpudoctor.errors import EXIT_NOTHING, EXIT_OK, UserError

HELP = "check the catalogue and your runbooks for schema errors"
DESCRIPTION = """\
Load every catalogue entry (built-in, GPUDOCTOR_KB and --kb folders) and report
each problem as FILE: FIELD: what is wrong. Exit 0 when all load, 1 otherwise,
2 when a DIR given here is not a folder."""


def add_arguments(parser) -> None:
    parser.add_argument("dirs", nargs="*", metavar="DIR", help="runbook folders to check (added to --kb)")


def run(args, out) -> int:
    from gpudoctor.kb.catalog import load_catalog

    import os

    for folder in args.dirs:  # named on this command line: a typo is a usage error, not a catalogue problem
        if os.path.isfile(folder):
            raise UserError(f"{folder}: a file; pass the folder that holds it")
        if not os.path.isdir(folder):
            raise UserError(f"{folder}: no such folder")
    catalog = load_catalog(args.kb + args.dirs, use_cache=False)
    problems = list(catalog.problems) + _unknown_probes(catalog)
    if args.json:
        out.write(json.dumps({"entries": len(catalog), "problems": problems}, indent=2))
    else:
        for problem in problems:
            out.write(f"{out.style('error', 'fail')} {problem}")
        summary = f"{len(catalog)} entries loaded, {len(problems)} problem(s)"
        out.write(out.style(summary, "ok" if not problems else "fail"))
    return EXIT_NOTHING if problems else EXIT_OK


def _unknown_probes(catalog) -> list[str]:
    """An entry's `probes:` naming no probe this gpudoctor has: show and diagnose would tell users to run it."""
    from gpudoctor.probes import registry

    known = set(registry.ids())
    return [f"{entry.source}: probes[{i}]: unknown probe {name!r} (known: {', '.join(sorted(known))})"
            for entry in catalog for i, name in enumerate(entry.probes) if name not in known]
