"""Frozen records (gpudoctor.kb.record) for catalogue entries: what the loader produces and everything else reads."""
from __future__ import annotations

from gpudoctor.kb.record import field, record

SECTIONS = ("launchers", "ddp", "fsdp", "deepspeed", "hangs", "multinode", "pitfalls", "guides", "user")

# Signals the diagnosis engine derives from the whole set of logs rather than from one line;
# a signature may name one with `derived:` instead of a regex or literal.
DERIVED_SIGNALS = {
    "collective-timeout": "a collective timed out (NCCL watchdog, gloo recv/send timeout)",
    "lost-peer": "a rank lost its peer: connection closed or reset, communicator aborted",
    "ranks-waiting": "some ranks timed out in a collective or lost their peer (either of the two above)",
    "rank-failed-first": "one rank raised its own error while others timed out or lost their peer",
    "ranks-in-different-collectives": "ranks were blocked in different collectives when they failed (tracebacks, "
                                      "stack dumps, Horovod's stall report, or NCCL watchdogs naming other work at "
                                      "the same SeqNum)",
    "collective-in-gated-path": "the odd rank out was blocked in a collective called from a save/eval/log function",
    "collective-not-joined": "flight recorder: a collective that some ranks of the group never reached",
    "collective-mismatch": "flight recorder: ranks disagree on a collective's op, sizes or dtypes at the same sequence id",
    "rank-left-loop-early": "a rank left the training loop (its log ends without an error, it waits in a collective "
                            "outside the training step, or it never timed out and only lost the peer that had) while "
                            "the others timed out or lost their peer inside the step (backward / all_reduce) of the "
                            "same epoch",
}

SECTION_TITLES = {
    "launchers": "Launchers & env",
    "ddp": "DDP",
    "fsdp": "FSDP",
    "deepspeed": "DeepSpeed",
    "hangs": "Hangs",
    "multinode": "Multi-node NCCL & elastic",
    "pitfalls": "DDP pitfalls",
    "guides": "Guides",
    "user": "Your runbooks",
}


@record(frozen=True)
class FixStep:
    text: str
    code: str | None = None
    lang: str | None = None


@record(frozen=True)
class Related:
    id: str
    why: str


@record(frozen=True)
class Pointer:
    """A topic outside the catalogue, shown as plain text."""

    topic: str
    note: str


@record(frozen=True)
class Reference:
    title: str
    url: str


@record(frozen=True)
class Provenance:
    """Where a signature's message comes from: the emitting code and its template, across versions."""

    repo: str  # owner/name on GitHub
    path: str  # file in that repository that prints the message
    template: str  # the message as in the source, placeholders kept (%s, {}, {name}, " << x << ")
    versions: str  # which releases print it this way, e.g. "torch 1.10-2.5"
    values: tuple[str, ...] = ()  # sample values for the placeholders, in order, where the defaults would not do


@record(frozen=True)
class Signature:
    """One log pattern that betrays an entry."""

    id: str
    pattern: str  # a regular expression; literals are escaped on load; "" for a derived signal
    weight: float
    literal: str | None = None  # set when the YAML gave a literal
    derived: str | None = None  # a name from DERIVED_SIGNALS instead of a pattern
    caseless: bool = False  # ignore_case, or an inline (?i) in the regex
    literals: tuple[str, ...] = ()  # one of these occurs in every match (lower-cased when caseless)
    needs: tuple[str, ...] = ()
    after: tuple[str, ...] = ()  # counts only on a line later in the same file than a hit of each of these
    min_files: int = 1  # counts only when this many different input files match it
    context: bool = False
    ignore_case: bool = False
    provenance: tuple[Provenance, ...] = ()  # the emitters' message templates this pattern was written from


# The transforms a fix action may name, by kind; engine/fixes implements each one (a test checks both agree).
FIX_TRANSFORMS = {
    "command": ("torchrun-standalone", "torchrun-multinode", "free-port", "accelerate-multi-gpu", "deepspeed-launcher",
                "nproc-to-gpus", "srun-one-task-per-node", "srun-per-node", "exclude-faulty-gpu",
                "drop-literal-local-rank"),
    "patch": ("device-from-local-rank", "find-unused-parameters", "join-uneven-inputs", "sync-batchnorm",
              "collective-out-of-rank-branch", "sampler-set-epoch", "rank-zero-side-effects", "init-timeout",
              "load-latest-checkpoint", "dataparallel-to-ddp", "save-on-each-node", "non-reentrant-checkpoint",
              "low-cpu-mem-usage", "trainer-ddp-timeout", "move-before-ddp", "distributed-sampler",
              "accumulation-no-sync", "fsdp-reduce-dtype", "full-state-dict-offload", "fsdp-auto-wrap",
              "move-targets", "init-before-ddp", "reshape-on-every-rank", "collective-skip",
              "fsdp-sharding-strategy", "lr-scale-world-size", "local-rank-both-spellings",
              "engine-backward", "master-port-setdefault", "lazy-shapes-before-ddp"),
    "config": ("ds-auto", "ds-drop-global-batch", "ds-keep-global-batch", "accelerate-multi-gpu", "ds-zero-stage",
               "accelerate-fsdp-strategy"),
}
# The facts a fix may be filled with: from the log (diagnose), the user (--param), or the action's defaults.
FIX_FACTS = {
    "port": "the rendezvous port the log names",
    "free_port": "a free port to move the job to",
    "interface": "the network interface NCCL should use",
    "world_size": "total number of processes",
    "nproc": "processes per node",
    "nnodes": "number of nodes",
    "master_addr": "address of the rendezvous (head) node",
    "rdzv_port": "port of the c10d rendezvous on the head node",
    "job_id": "rendezvous id shared by every node",
    "timeout_minutes": "collective timeout for init_process_group or the HF Trainer's ddp_timeout",
    "checkpoint": "path of the checkpoint to resume from",
    "sample_input": "one input batch for a forward pass, as a Python expression (torch.zeros(1, 32, device=device))",
    "ds_config": "DeepSpeed JSON config to pass to the launcher",
    "zero_stage": "the ZeRO stage to raise a DeepSpeed config to",
    "offload": "where ZeRO stage 3 offloads optimizer states and weights (none or cpu)",
    "elastic_timeout": "seconds Horovod's elastic driver waits for enough workers (HOROVOD_ELASTIC_TIMEOUT)",
    "dump_prefix": "path prefix of the NCCL flight recorder's per-rank dump files",
    "min_num_params": "smallest parameter count of a submodule FSDP's size-based policy makes its own unit",
    "sharding_strategy": "the FSDP sharding strategy to switch to (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, ...)",
    "lr_scaling": "how the learning rate follows the number of processes: linear (default) or sqrt",
    "bad_host": "the node whose GPU failed (MN8), to leave out of the job",
    "bad_gpu": "index of the failed GPU on its node (MN8), to hide from the job",
}


# Evidence that is not a signature of the entry but still names one of its causes: the engine's structural rules
# (engine/*rules*.py), the weak hints beside them, and the second witnesses (lint checks of --script and --cmd, probes).
WITNESS_PREFIXES = ("rule:", "hint:", "script:", "command:", "probe:")


@record(frozen=True)
class FixFor:
    """Which of an entry's fixes one kind of its evidence calls for: an entry whose fix steps answer different causes
    (an HF Trainer bug against the user's own save, a ZeRO stage too low against one too high) points the signatures
    and rules that tell those causes apart at their own step and executable fixes."""

    evidence: tuple[str, ...]  # signature ids of the entry, or a rule or witness id ("rule:zero-init-oom")
    step: int = 0  # 1-based number of the entry's `fix` step; 0 for none of its own
    actions: tuple[str, ...] = ()  # ids of the entry's fix_actions


@record(frozen=True)
class FixAction:
    id: str
    kind: str  # env | command | patch | config
    safety: str  # safe | unsafe | display-only
    title: str
    params: tuple[tuple[str, object], ...] = ()

    def param(self, name: str, default: object = None) -> object:
        for key, value in self.params:
            if key == name:
                return value
        return default


@record(frozen=True)
class Entry:
    id: str
    title: str
    section: str
    summary: str
    symptoms: tuple[str, ...]
    cause: str
    fix_summary: str
    fix: tuple[FixStep, ...]
    log_visibility: str
    log_visibility_note: str = ""
    error_strings: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    paraphrases: tuple[str, ...] = ()  # the failure in users' words (issue-title style), for search
    signatures: tuple[Signature, ...] = ()
    probes: tuple[str, ...] = ()
    fix_actions: tuple[FixAction, ...] = ()
    fix_for: tuple[FixFor, ...] = ()  # which fix step and fix actions each kind of evidence calls for
    related: tuple[Related, ...] = ()
    explains: tuple[str, ...] = ()  # entries whose symptom this cause produces (a crash -> a timeout)
    see_also: tuple[Pointer, ...] = ()
    references: tuple[Reference, ...] = ()
    source: str = ""  # the file it came from, as shown in messages
    origin: str = "builtin"  # builtin | user
    extra: tuple[tuple[str, object], ...] = field(default=(), compare=False)


def entry_to_dict(entry: Entry) -> dict:
    """A JSON-ready dict of an entry, in schema field names."""
    return {
        "id": entry.id,
        "title": entry.title,
        "section": entry.section,
        "summary": entry.summary,
        "symptoms": list(entry.symptoms),
        "cause": entry.cause,
        "fix_summary": entry.fix_summary,
        "fix": [{k: v for k, v in (("text", s.text), ("code", s.code), ("lang", s.lang)) if v is not None} for s in entry.fix],
        "log_visibility": entry.log_visibility,
        "log_visibility_note": entry.log_visibility_note or None,
        "error_strings": list(entry.error_strings),
        "keywords": list(entry.keywords),
        "paraphrases": list(entry.paraphrases),
        "signatures": [
            {"id": s.id, **({"derived": s.derived} if s.derived else {"literal": s.literal} if s.literal is not None
                            else {"regex": s.pattern}),
             "weight": s.weight, "needs": list(s.needs), "after": list(s.after), "min_files": s.min_files,
             "context": s.context,
             "provenance": [{"repo": p.repo, "path": p.path, "template": p.template, "versions": p.versions,
                             **({"values": list(p.values)} if p.values else {})}
                            for p in s.provenance]}
            for s in entry.signatures
        ],
        "probes": list(entry.probes),
        "fix_actions": [{"id": a.id, "kind": a.kind, "safety": a.safety, "title": a.title} for a in entry.fix_actions],
        "fix_for": [{"evidence": list(f.evidence), "step": f.step or None, "actions": list(f.actions)}
                    for f in entry.fix_for],
        "related": [{"id": r.id, "why": r.why} for r in entry.related],
        "explains": list(entry.explains),
        "see_also": [{"topic": p.topic, "note": p.note} for p in entry.see_also],
        "references": [{"title": r.title, "url": r.url} for r in entry.references],
        "source": entry.source,
        "origin": entry.origin,
    }
