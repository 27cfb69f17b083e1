"""`gpudoctor check`: every probe that applies here plus the multi-node first-move checklist, one row each."""
from __future__ import annotations

import json
import os
import time

from gpudoctor.commands.probe import Progress, add_probe_options, probe_options
from gpudoctor.errors import EXIT_NOTHING, EXIT_OK

HELP = "run every probe and the multi-node checklist, one pass/fail/skip row each"
DESCRIPTION = """\
Run every probe in parallel child processes (a crashing or hanging probe
becomes an `error` row; the rest still run), then the first-move checklist for
multi-node jobs (multinode.md). Rows read: pass, fail, warn, skip (with the
reason), error.

exit codes: 0 nothing failed, 1 a probe or an applicable checklist step failed,
2 usage"""

PARALLEL = 4  # children at once: enough to overlap torch imports, few enough for a 2-core machine


def add_arguments(parser) -> None:
    parser.add_argument("--skip", action="append", default=[], metavar="ID", help="leave a probe out (repeatable)")
    add_probe_options(parser)


def run(args, out) -> int:
    from gpudoctor.errors import UserError
    from gpudoctor.probes import checklist, hostinfo, registry, report, session

    unknown = [s for s in args.skip if registry.get(s) is None]
    if unknown:
        raise UserError(f"--skip {', '.join(unknown)}: known probes are {', '.join(registry.ids())}")
    probes = [p for p in registry.PROBES if p.id not in {s.lower() for s in args.skip}]
    options = probe_options(args)
    notice = session.job_notice(hostinfo.job_from_env(os.environ), args.timeout)
    if notice and options.get("env") is None:
        args.err.write(notice + "\n")
    progress = Progress(args.err, len(probes))
    start = time.monotonic()
    try:
        outcome = session.run(probes, options, parallel=PARALLEL, timeout_s=args.timeout, on_done=progress)
    finally:
        progress.clear()
    if not outcome.prints:
        return EXIT_OK
    elapsed = time.monotonic() - start
    results = outcome.results
    job = outcome.job or hostinfo.job_from_env(os.environ)
    multi_node = bool(args.multinode or args.peer or (job and job.multi_node))
    steps = checklist.first_moves({r.probe: r for r in results}, os.environ, multi_node)
    failed = (any(r.problem for r in results) or any(r.problem for _, r in outcome.node_rows)
              or any(s.failed for s in steps) or bool(outcome.missing_ranks))
    code = EXIT_NOTHING if failed else EXIT_OK
    if args.json:
        data = {"schema": "gpudoctor.check/1", "results": [r.to_dict() for r in results],
                "checklist": [s.to_dict() for s in steps],
                "multi_node": multi_node, "seconds": round(elapsed, 2), "exit_code": code}
        if outcome.job is not None:
            data["world_size"] = outcome.job.world_size
            data["nodes_differing"] = [{"host": h, **r.to_dict()} for h, r in outcome.node_rows]
            data["missing_ranks"] = outcome.missing_ranks
        out.write(json.dumps(data, indent=2, default=str))
        return code
    out.write(out.style(f"probes ({report.counts(results)}; {elapsed:.1f} s)", "heading"))
    for result in results:
        out.write(report.result_row(out, result))
    for host, result in outcome.node_rows:
        out.write(report.result_row(out, result, f"{result.probe}@{host}"[: report.ID_WIDTH]))
    if outcome.missing_ranks:
        out.write(out.style(f"ranks {outcome.missing_ranks} sent no report (not started, or they could not reach "
                            "rank 0's store)", "fail"))
    title = "multi-node first-move checklist" + ("" if multi_node else " (single node: --multinode to judge it)")
    out.write(out.style(title, "heading"))
    for step in steps:
        style = {"pass": "ok", "fail": "fail", "warn": "bold"}.get(step.word, "skip")
        out.write(report.row(out, step.word, style, step.entries, step.reason))
    if failed:
        out.write(out.style("details: gpudoctor probe ID (add --json for every figure)", "dim"))
    return code
