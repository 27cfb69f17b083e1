"""`gpudoctor stacks`: dump where every rank of a hung job on this node is stopped (py-spy), then diagnose that."""
from __future__ import annotations

from gpudoctor.errors import EXIT_NOTHING, UserError

HELP = "dump where each rank of a running (hung) job is stopped, and diagnose it"
DESCRIPTION = """\
While a job hangs, find its ranks on this machine (the Python processes whose
environment holds RANK, LOCAL_RANK or an MPI/SLURM rank), dump each one's Python
stack with py-spy at the same moment (each is paused for an instant, nothing in
it changes), save the dumps as rank<N>.py-spy.txt in a folder, and diagnose
that folder: a rank stopped in a save or eval function while the others wait in
a collective is D21, ranks waiting in different collectives D19. Two jobs with
ranks on this node are listed, each with the --pid options that pick it. Run
it on each node of a multi-node job and diagnose the folders together. Needs
py-spy (pip install py-spy) and permission to read the processes (their user,
or root).

examples:
  gpudoctor stacks                       # every rank on this node
  gpudoctor stacks --pid 4121 --pid 4122 # these processes only
  gpudoctor stacks --out hang-node3/ --json
  srun --overlap --jobid=4242 --ntasks-per-node=1 \\
       gpudoctor stacks --out 'hang/{host}'  # each node of a SLURM job
  gpudoctor diagnose hang/               # every node's dumps together

exit codes: 0 a cause matched, 1 no rank found or nothing known, 2 py-spy
missing, a bad --pid or no dump could be taken"""


def add_arguments(parser) -> None:
    parser.add_argument("--pid", type=int, action="append", default=[], metavar="PID",
                        help="dump this process (repeatable) instead of finding the ranks")
    parser.add_argument("--out", metavar="DIR", help="where the dumps go, a new or empty folder; {host} becomes this "
                        "machine's name (default: a new folder here, named after the host and the time)")
    parser.add_argument("--timeout", type=float, default=20.0, metavar="S",
                        help="seconds each dump may take (default 20)")
    parser.add_argument("--format", "-f", choices=("text", "json", "markdown"), default=None,
                        help="output format of the diagnosis (default text; --json is --format json)")
    parser.add_argument("--top", type=int, default=5, metavar="N", help="at most N findings of each tier (default 5)")


def run(args, out) -> int:
    from gpudoctor.probes import stackdump
    from gpudoctor.term import sanitize

    err = args.err
    if args.timeout <= 0:
        raise UserError("--timeout must be more than 0 seconds")
    if any(pid <= 0 for pid in args.pid):
        raise UserError("--pid must be a process id (a positive number)")
    pyspy = stackdump.py_spy()
    if pyspy is None:
        raise UserError("py-spy is not installed: pip install py-spy (it reads a running process's Python stack, "
                        "pausing it for an instant)")
    if args.pid:
        try:
            processes = stackdump.processes_by_pid(sorted(set(args.pid)))
        except ValueError as exc:
            raise UserError(f"--pid: {exc}") from None
    else:
        processes = stackdump.find_training_processes()
        if not processes:
            message = ("no training process on this machine: no Python process here has RANK, LOCAL_RANK or an "
                       "MPI/SLURM rank in its environment (another user's processes need root); name them with --pid")
            err.write(f"gpudoctor: {message}")
            if args.json or args.format == "json":  # a script reading stdout gets JSON in every outcome
                import json

                out.write(json.dumps({"schema": "gpudoctor.diagnosis/2", "findings": [], "inputs": [],
                                      "stacks": {"dumped": [], "failed": [], "message": message}}, indent=2))
            return EXIT_NOTHING
        _one_job(stackdump.jobs(processes))
    try:
        folder = stackdump.new_folder(args.out)
    except ValueError as exc:
        raise UserError(f"--out {exc}") from None
    err.write(f"dumping {len(processes)} process(es) with py-spy…")
    dumps = stackdump.dump_stacks(pyspy, processes, args.timeout)
    for dump in dumps:
        if dump.text is None:
            err.write(f"gpudoctor: warning: {dump.process.label} (pid {dump.process.pid}): {sanitize(dump.error)}")
    written = stackdump.save(folder, dumps)
    if not written:
        raise UserError(f"no stack could be dumped ({len(dumps)} tried); the reasons are above")
    err.write(f"{len(written)} stack(s) saved in {folder}/")
    from gpudoctor.commands import diagnose

    args.paths, args.tui, args.probe, args.script, args.cmd = [str(folder)], False, False, None, None
    args.engine, args.no_hyperscan, args.stdin = "auto", False, None
    args.json_extra = {"stacks": {
        "folder": str(folder),
        "dumped": [{"pid": d.process.pid, "rank": d.process.rank, "local_rank": d.process.local_rank,
                    "file": str(path)} for d, path in written],
        "failed": [{"pid": d.process.pid, "rank": d.process.rank, "error": d.error} for d in dumps if d.text is None],
    }}
    return diagnose.run(args, out)


def _one_job(by_job: dict) -> None:
    """Two jobs' ranks on this node (two rank 0s, two rendezvous) must not be read as one job: name them and stop."""
    from gpudoctor.term import sanitize

    if len(by_job) < 2:
        return
    lines = [f"{len(by_job)} jobs have ranks on this machine; pick one with --pid:"]
    for job, procs in by_job.items():
        ranks = ", ".join(str(p.rank) for p in procs[:8]) + (" ..." if len(procs) > 8 else "")
        pids = " ".join(f"--pid {p.pid}" for p in procs)
        lines.append(f"  {sanitize(job or 'no launcher variables')} (ranks {ranks}):\n    gpudoctor stacks {pids}")
    raise UserError("\n".join(lines))
