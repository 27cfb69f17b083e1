"""`gpudoctor probe`: run live probes by id or for a catalogue entry, here or on every rank under torchrun."""
from __future__ import annotations

import json
import os
import re

from gpudoctor.errors import EXIT_NOTHING, EXIT_OK, UserError

HELP = "run live probes that confirm or rule out a cause on this machine"
DESCRIPTION = """\
Run probes in child processes (each killed at its timeout) and report one row
per probe: pass (ruled out), fail (confirmed), warn, skip (with the reason) or
error.

  gpudoctor probe port nic          two probes by id (--list shows them all)
  gpudoctor probe --for D4          the probes that confirm catalogue entry D4
  torchrun --nproc-per-node=2 -m gpudoctor probe collectives
                                    every rank runs; rank 0 prints one report

exit codes: 0 nothing wrong found, 1 a probe confirmed a problem or errored,
2 usage"""


def add_arguments(parser) -> None:
    parser.add_argument("ids", nargs="*", metavar="ID", help="probe ids to run")
    parser.add_argument("--for", dest="entries", action="append", default=[], metavar="ENTRY",
                        help="run the probes that confirm a catalogue entry (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the probes and the entries they confirm")
    add_probe_options(parser)


def add_probe_options(parser) -> None:
    """Inputs the probes take; shared with `gpudoctor check`."""
    g = parser.add_argument_group("probe inputs")
    g.add_argument("--peer", metavar="HOST", help="another node, for the MTU path test (ping)")
    g.add_argument("--port", type=int, help="rendezvous port to test (default MASTER_PORT or 29500)")
    g.add_argument("--nproc", type=int, help="local ranks for the collectives probe (default: GPUs, or 2)")
    g.add_argument("--backend", choices=("gloo", "nccl"), help="backend for collectives/desync")
    g.add_argument("--max-size", metavar="BYTES", help="largest all_reduce message, e.g. 64M "
                                                       "(default 256M on GPUs, 4M on CPU)")
    g.add_argument("--pg-timeout", type=float, metavar="S", help="the timeout your script passes to "
                                                                 "init_process_group, in seconds")
    g.add_argument("--accelerate-config", metavar="FILE", help="accelerate config (default: accelerate's own)")
    g.add_argument("--hostfile", metavar="FILE", help="DeepSpeed hostfile (default ./hostfile, /job/hostfile)")
    g.add_argument("--ds-config", metavar="FILE", help="DeepSpeed JSON config (default ./ds_config.json)")
    g.add_argument("--grad-accum", type=int, metavar="N", help="gradient accumulation set outside the JSON")
    g.add_argument("--multinode", action="store_true", help="judge as a job that spans nodes")
    g.add_argument("--checkpoint-dir", metavar="DIR",
                   help="where checkpoints are saved (default $OUTPUT_DIR or $CHECKPOINT_DIR, else this directory)")
    g.add_argument("--timeout", type=float, metavar="S", help="override every probe's own timeout")
    g.add_argument("--sys-root", metavar="DIR", help=argparse_suppress())


def argparse_suppress():
    import argparse

    return argparse.SUPPRESS  # --sys-root reads /sys and /proc from a copy: for tests, not for users


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmMgG]?)(?:i?[bB])?\s*", text or "")
    if not m:
        raise UserError(f"--max-size {text!r}: expected a size like 4M or 262144")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    size = int(float(m.group(1)) * scale)
    if size < 8:
        raise UserError("--max-size must be at least 8 bytes")
    return size


def probe_options(args) -> dict:
    """The options dict the runner hands every probe, from the command line."""
    options = {
        "peer": args.peer, "port": args.port, "nproc": args.nproc, "backend": args.backend,
        "max_bytes": parse_size(args.max_size) if args.max_size else None, "pg_timeout_s": args.pg_timeout,
        "accelerate_config": args.accelerate_config, "hostfile": args.hostfile, "ds_config": args.ds_config,
        "grad_accum": args.grad_accum, "multinode": args.multinode or None, "sys_root": args.sys_root,
        "checkpoint_dir": args.checkpoint_dir,
    }
    if args.nproc is not None and args.nproc < 1:
        raise UserError("--nproc must be at least 1")
    for flag, value in (("--timeout", args.timeout), ("--pg-timeout", args.pg_timeout)):
        if value is not None and not value > 0:  # NaN too
            raise UserError(f"{flag} must be a number of seconds above 0, not {value:g}")
    if args.grad_accum is not None and args.grad_accum < 1:
        raise UserError("--grad-accum must be at least 1")
    if args.port is not None and not 0 < args.port < 65536:
        raise UserError(f"--port must be between 1 and 65535, not {args.port}")
    return {k: v for k, v in options.items() if v is not None}


def select(args) -> list:
    from gpudoctor.probes import registry

    chosen, unknown = [], []
    for name in args.ids:
        probe = registry.get(name)
        if probe:
            chosen.append(probe)
        else:
            unknown.append(name)
    if unknown:
        raise UserError(f"unknown probe {', '.join(unknown)}; known probes: {', '.join(registry.ids())}")
    for entry in args.entries:
        found = _probes_for_entry(entry, args.kb)
        chosen += found
    if not chosen:
        raise UserError(f"name probes to run ({', '.join(registry.ids())}) or --for ENTRY; --list shows them")
    unique = []
    for probe in chosen:
        if probe not in unique:
            unique.append(probe)
    return unique


def _probes_for_entry(entry: str, kb_dirs) -> list:
    from gpudoctor.probes import registry

    catalog = _catalog(kb_dirs)
    catalog_entry = catalog.get(entry)
    found = registry.probes_for(catalog, entry)
    if found:
        return found
    mapping = catalog.probe_map()
    covered = ", ".join(mapping) or "none (the catalogue could not be read)"
    if catalog_entry is None:
        raise UserError(f"unknown entry {entry!r}; probes exist for: {covered}")
    raise UserError(f"no probe confirms {catalog_entry.id}; probes exist for: {covered}")


class _NoCatalog:
    def get(self, _):
        return None

    def probes_of(self, _) -> tuple:
        return ()

    def probe_map(self) -> dict:
        return {}


def _catalog(kb_dirs):
    """The catalogue for titles and `probes` fields; the probes work without it (entries may be in progress)."""
    try:
        from gpudoctor.kb.catalog import load_catalog

        return load_catalog(kb_dirs)
    except Exception:
        return _NoCatalog()


def entry_titles(results, kb_dirs) -> dict[str, str]:
    catalog = _catalog(kb_dirs)
    titles = {}
    for result in results:
        for entry in result.entries:
            found = catalog.get(entry)
            if found is not None:
                titles[entry] = getattr(found, "title", "")
    return titles


class Progress:
    """One status line on stderr that replaces itself, only when stderr is a terminal."""

    def __init__(self, err, total: int):
        self.err, self.total, self.done = err, total, 0
        self.live = hasattr(err.stream, "isatty") and err.stream.isatty()

    def __call__(self, result) -> None:
        self.done += 1
        if self.live:
            self.err.stream.write(f"\r\x1b[K[{self.done}/{self.total}] {result.probe}: {result.status.value}")
            self.err.stream.flush()

    def clear(self) -> None:
        if self.live:
            self.err.stream.write("\r\x1b[K")
            self.err.stream.flush()


def run(args, out) -> int:
    from gpudoctor.probes import hostinfo, registry, report, session

    if args.list:
        return _list(out, registry, args.json, args.kb)
    probes = select(args)
    options = probe_options(args)
    notice = session.job_notice(hostinfo.job_from_env(os.environ), args.timeout)
    if notice and options.get("env") is None:
        args.err.write(notice + "\n")
    progress = Progress(args.err, len(probes))
    try:
        outcome = session.run(probes, options, timeout_s=args.timeout, on_done=progress)
    finally:
        progress.clear()
    if not outcome.prints:
        return EXIT_OK
    results = outcome.results
    failed = (any(r.problem for r in results) or any(r.problem for _, r in outcome.node_rows)
              or bool(outcome.missing_ranks))
    code = EXIT_NOTHING if failed else EXIT_OK
    if args.json:
        out.write(json.dumps(json_report(outcome, code), indent=2, default=str))
        return code
    titles = entry_titles(results, args.kb)
    for result in results:
        out.write(report.result_row(out, result))
        for line in report.evidence_lines(out, result, titles):
            out.write(line)
    for host, result in outcome.node_rows:
        out.write(report.result_row(out, result, f"{result.probe}@{host}"[: report.ID_WIDTH]))
    if outcome.missing_ranks:
        out.write(out.style(f"ranks {outcome.missing_ranks} sent no report (not started, or they could not reach "
                            "rank 0's store)", "fail"))
    return code


def json_report(outcome, code: int) -> dict:
    data = {"schema": "gpudoctor.probes/1", "results": [r.to_dict() for r in outcome.results], "exit_code": code}
    if outcome.job is not None:
        data["world_size"] = outcome.job.world_size
        data["nodes_differing"] = [{"host": h, **r.to_dict()} for h, r in outcome.node_rows]
        data["missing_ranks"] = outcome.missing_ranks
    return data


def _list(out, registry, as_json: bool, kb_dirs=None) -> int:
    from gpudoctor.probes import report

    catalog = _catalog(kb_dirs)
    if as_json:
        probes = [{"id": p.id, "title": p.title, "confirms": registry.entries_for(catalog, p.id),
                   "needs": list(p.needs), "timeout_s": p.timeout_s, "scope": p.scope} for p in registry.PROBES]
        out.write(json.dumps({"probes": probes}, indent=2))
        return EXIT_OK
    for probe in registry.PROBES:
        confirms = ",".join(registry.entries_for(catalog, probe.id)) or "-"
        needs = f" [needs {', '.join(probe.needs)}]" if probe.needs else ""
        out.write(report.row(out, f"{probe.timeout_s:g}s", "dim", probe.id, f"{confirms}: {probe.title}{needs}"))
    return EXIT_OK
