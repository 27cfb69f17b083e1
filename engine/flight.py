"""Cross-rank flight recorder analysis: the first collective a rank never joined, and mismatched op, size or dtype."""
from __future__ import annotations

from dataclasses import dataclass

from gpudoctor.engine.flight_load import (
    MAX_DUMP_BYTES,
    SNIFF_BYTES,
    Dump,
    Record,
    FlightError,
    Frame,
    PgConfig,
    PgStatus,
    load_dump,
    looks_like_dump,
    parse_dump,
    rank_from_path,
)
from gpudoctor.kb.record import asdict

__all__ = [
    "MAX_DUMP_BYTES", "SNIFF_BYTES", "Dump", "Record", "FlightError", "Frame", "PgConfig", "PgStatus",
    "load_dump", "looks_like_dump", "parse_dump", "rank_from_path",
    "FlightReport", "GroupReport", "Incomplete", "Mismatch", "ValueGroup", "RankProgress",
    "analyze", "report_to_dict",
]

# torch's analyzer stops at 10 mismatches per group: once ranks disagree, later pairings are mostly noise.
MAX_MISMATCHES_PER_GROUP = 10

# Collectives whose per-rank input or output shapes may legitimately differ (uneven splits, root-only buffers).
_FREE_INPUT_SIZES = {"all_to_all", "all_to_all_single", "all_to_all_v_single", "scatter", "reduce_scatter_v"}
_FREE_OUTPUT_SIZES = {"all_to_all", "all_to_all_single", "all_to_all_v_single", "gather", "all_gather_v"}
_FIELDS = ("op", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes")


@dataclass(frozen=True)
class Incomplete:
    """A collective some members of the group enqueued and others never reached."""

    seq: int
    op: str
    joined: tuple[int, ...]
    missing: tuple[int, ...]
    states: tuple[str, ...]  # distinct states of the joined ranks' entries


@dataclass(frozen=True)
class ValueGroup:
    value: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class Mismatch:
    """Ranks that disagree on one field of the same collective (same group, same sequence id)."""

    seq: int
    op: str  # the op most ranks called
    field: str  # op | input_sizes | output_sizes | input_dtypes | output_dtypes
    expected: str  # the value most ranks had (lowest rank's on a tie)
    odd_ranks: tuple[int, ...]
    values: tuple[ValueGroup, ...]


@dataclass(frozen=True)
class GroupReport:
    pg_name: str
    pg_desc: str
    members: tuple[int, ...]
    membership: str  # pg_config | all_dumps (default group) | seen_in_entries
    ranks_without_dump: tuple[int, ...]
    first_seq: int | None
    last_seq: int | None
    first_incomplete: Incomplete | None
    mismatches: tuple[Mismatch, ...]


@dataclass(frozen=True)
class RankProgress:
    """Where one rank stood in one group when it dumped."""

    rank: int
    pg_name: str
    pg_desc: str
    last_enqueued: int | None
    last_enqueued_op: str | None
    last_enqueued_state: str | None
    last_started: int | None
    last_completed: int | None
    source: str  # pg_status | entries


@dataclass(frozen=True)
class FlightReport:
    ranks: tuple[int, ...]
    groups: tuple[GroupReport, ...]
    progress: tuple[RankProgress, ...]
    notes: tuple[str, ...]
    summary: str

    @property
    def healthy(self) -> bool:
        return not any(g.first_incomplete or g.mismatches or g.ranks_without_dump for g in self.groups)


def analyze(dumps: list[Dump]) -> FlightReport:
    """Line up every rank's collectives per process group and sequence id, and say where they part ways."""
    by_rank, notes = _index_ranks(dumps)
    groups = _collect_groups(by_rank)
    if any(e.is_p2p for d in by_rank.values() for e in d.entries):
        notes.append("send/recv entries are not matched across ranks; only collectives are compared")
    pg_ids = _pg_ids(by_rank)
    reports = tuple(_group_report(key, desc, per_rank, by_rank, pg_ids) for key, (desc, per_rank) in groups.items())
    progress = tuple(p for rank in sorted(by_rank) for p in _progress(by_rank[rank]))
    return FlightReport(
        ranks=tuple(sorted(by_rank)), groups=reports, progress=progress, notes=tuple(notes),
        summary=_summary(reports, sorted(by_rank), progress),
    )


def _index_ranks(dumps: list[Dump]) -> tuple[dict[int, Dump], list[str]]:
    by_rank: dict[int, Dump] = {}
    notes: list[str] = []
    for dump in dumps:
        if dump.rank is None:
            notes.append(f"{dump.path}: no rank number at the end of the file name; left out of the comparison")
        elif dump.rank in by_rank:
            notes.append(f"{dump.path}: a second dump for rank {dump.rank}; using {by_rank[dump.rank].path}")
        else:
            by_rank[dump.rank] = dump
    versions = sorted({d.version for d in by_rank.values()})
    if len(versions) > 1:
        notes.append(f"dumps come from different recorder versions ({', '.join(versions)}); fields may differ")
    return by_rank, notes


_GroupKey = tuple[str, tuple[int, ...] | None]


def _config_ranks(dump: Dump) -> dict[str, tuple[int, ...]]:
    # gloo records its groups under an empty name with a stale member list, so only named entries count
    return {c.name: c.ranks for c in dump.pg_config if c.name and c.ranks}


def _collect_groups(by_rank: dict[int, Dump]) -> dict[_GroupKey, tuple[str, dict[int, dict[int, list[Record]]]]]:
    """(group name, members if configured) -> (desc, rank -> collective seq id -> entries; coalesced ops share one)."""
    groups: dict[_GroupKey, tuple[str, dict[int, dict[int, list[Record]]]]] = {}
    for rank in sorted(by_rank):
        config = _config_ranks(by_rank[rank])
        for entry in by_rank[rank].entries:
            if entry.is_p2p:
                continue
            # split_group can give two groups one name; their member lists still tell them apart
            key = (entry.pg_name, config.get(entry.pg_name))
            _, per_rank = groups.setdefault(key, (entry.pg_desc, {}))
            per_rank.setdefault(rank, {}).setdefault(entry.collective_seq_id, []).append(entry)
    return dict(sorted(groups.items(), key=lambda kv: _group_order(kv[0][0])))


def _pg_ids(by_rank: dict[int, Dump]) -> dict[int | None, dict[str, str]]:
    """rank -> group name -> the id its pg_status is keyed by; rank None holds the first id any rank used."""
    ids: dict[int | None, dict[str, str]] = {None: {}}
    for rank, dump in by_rank.items():
        mine = ids.setdefault(rank, {})
        for e in dump.entries:
            mine.setdefault(e.pg_name, str(e.pg_id))
            ids[None].setdefault(e.pg_name, str(e.pg_id))
    return ids


def _group_order(name: str) -> tuple[int, int, str]:
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def _members(key: _GroupKey, desc: str, per_rank: dict, by_rank: dict[int, Dump]) -> tuple[tuple[int, ...], str]:
    name, configured = key
    if configured is not None:
        return tuple(sorted(set(configured))), "pg_config"
    if desc == "default_pg" or name == "0":
        return tuple(sorted(by_rank)), "all_dumps"
    return tuple(sorted(per_rank)), "seen_in_entries"


def _group_report(key: _GroupKey, desc: str, per_rank: dict[int, dict[int, list[Record]]],
                  by_rank: dict[int, Dump], pg_ids: dict[int | None, dict[str, str]]) -> GroupReport:
    members, membership = _members(key, desc, per_rank, by_rank)
    observed = [r for r in members if r in by_rank]
    reach = {r: _reach(by_rank[r], key[0], per_rank.get(r, {}), pg_ids) for r in observed}
    first_kept = {r: min(per_rank[r]) for r in observed if per_rank.get(r)}
    all_seqs = sorted({s for seqs in per_rank.values() for s in seqs})

    first_incomplete: Incomplete | None = None
    mismatches: list[Mismatch] = []
    for seq in all_seqs:
        joined = {r: per_rank[r][seq] for r in observed if seq in per_rank.get(r, {})}
        # a rank whose buffer starts after `seq` dropped it from the ring buffer: unknown, not missing
        missing = [r for r in observed if r not in joined and reach[r] < seq and first_kept.get(r, 0) <= seq]
        if missing and joined and first_incomplete is None:
            entries = [e for ops in joined.values() for e in ops]
            first_incomplete = Incomplete(
                seq=seq, op=_ops_label(next(iter(joined.values()))), joined=tuple(sorted(joined)),
                missing=tuple(missing), states=tuple(sorted({e.state for e in entries})),
            )
        if len(joined) > 1 and len(mismatches) < MAX_MISMATCHES_PER_GROUP:
            mismatches.extend(_compare(seq, joined))
    return GroupReport(
        pg_name=key[0], pg_desc=desc, members=members, membership=membership,
        ranks_without_dump=tuple(r for r in members if r not in by_rank),
        first_seq=all_seqs[0] if all_seqs else None, last_seq=all_seqs[-1] if all_seqs else None,
        first_incomplete=first_incomplete, mismatches=tuple(mismatches[:MAX_MISMATCHES_PER_GROUP]),
    )


def _reach(dump: Dump, pg_name: str, seqs: dict[int, list[Record]], pg_ids: dict[int | None, dict[str, str]]) -> int:
    """The highest collective seq id this rank enqueued in the group, from its entries or its pg_status."""
    best = max(seqs, default=0)
    # pg_status is keyed by the group's numeric id, which only entries tie to a name: use this rank's own
    # mapping, else any rank's (ids agree across ranks for groups that every rank creates)
    wanted = pg_ids[dump.rank].get(pg_name) or pg_ids[None].get(pg_name)
    status = next((s for s in dump.pg_status if s.pg_id == wanted), None)
    if status is not None and status.last_enqueued is not None:
        best = max(best, status.last_enqueued)
    return best


def _ops_label(entries: list[Record]) -> str:
    return "+".join(e.op for e in entries)


def _field_value(entries: list[Record], field: str) -> tuple | None:
    """The raw value ranks must agree on, or None where there is nothing to compare."""
    if field == "op":
        return tuple(e.op for e in entries)
    if field.endswith("sizes") and any(
            e.op in (_FREE_INPUT_SIZES if field == "input_sizes" else _FREE_OUTPUT_SIZES) for e in entries):
        return None
    value = tuple(getattr(e, field) for e in entries)
    # an empty side (a non-root rank of gather/scatter, a barrier) has nothing to compare
    return value if any(value) else None


def _format_value(value: tuple, field: str) -> str:
    if field == "op":
        return "+".join(value)
    if field.endswith("sizes"):
        return " | ".join(", ".join("[" + ", ".join(map(str, shape)) + "]" for shape in op) for op in value)
    return " | ".join(", ".join(op) for op in value)


def _compare(seq: int, joined: dict[int, list[Record]]) -> list[Mismatch]:
    # nearly every collective matches: one cheap whole-signature check spares the per-field work
    signatures = {tuple((e.op, e.input_sizes, e.output_sizes, e.input_dtypes, e.output_dtypes) for e in ops)
                  for ops in joined.values()}
    if len(signatures) == 1:
        return []
    found = []
    for field in _FIELDS:
        by_value: dict[tuple, list[int]] = {}
        for rank in sorted(joined):
            value = _field_value(joined[rank], field)
            if value is not None:
                by_value.setdefault(value, []).append(rank)
        if len(by_value) < 2:
            continue
        expected = max(by_value, key=lambda v: (len(by_value[v]), -by_value[v][0]))
        found.append(Mismatch(
            seq=seq, op=_ops_label(joined[by_value[expected][0]]), field=field,
            expected=_format_value(expected, field),
            odd_ranks=tuple(sorted(r for v, rs in by_value.items() if v != expected for r in rs)),
            values=tuple(ValueGroup(_format_value(v, field), tuple(rs))
                         for v, rs in sorted(by_value.items(), key=lambda kv: kv[1][0])),
        ))
        if field == "op":
            break  # different ops have different buffers; comparing their sizes says nothing more
    return found


def _progress(dump: Dump) -> list[RankProgress]:
    out = []
    names: dict[str, tuple[str, int]] = {}
    for e in dump.entries:
        names.setdefault(e.pg_name, (e.pg_desc, e.pg_id))
    for pg_name, (desc, pg_id) in sorted(names.items(), key=lambda kv: _group_order(kv[0])):
        collectives = [e for e in dump.entries if e.pg_name == pg_name and not e.is_p2p]
        last = max(collectives, key=lambda e: (e.collective_seq_id, e.op_id), default=None)
        status = next((s for s in dump.pg_status if s.pg_id == str(pg_id)), None)
        if status is not None:
            enq, started, done, source = status.last_enqueued, status.last_started, status.last_completed, "pg_status"
        else:
            completed = [e.collective_seq_id for e in collectives if e.state == "completed"]
            started_ = [e.collective_seq_id for e in collectives if e.state in ("started", "completed")]
            enq = last.collective_seq_id if last else None
            started, done, source = max(started_, default=None), max(completed, default=None), "entries"
        at_enq = [e for e in collectives if e.collective_seq_id == enq]
        out.append(RankProgress(
            rank=dump.rank if dump.rank is not None else -1, pg_name=pg_name, pg_desc=desc,
            last_enqueued=enq, last_enqueued_op=_ops_label(at_enq) if at_enq else None,
            last_enqueued_state=at_enq[-1].state if at_enq else None,
            last_started=started, last_completed=done, source=source,
        ))
    return out


def _pg_label(name: str, desc: str) -> str:
    return f"pg {name} ({desc})" if desc and desc != "undefined" else f"pg {name}"


def _ranks_text(ranks: tuple[int, ...] | list[int]) -> str:
    """Text like 'rank 2', 'ranks 0, 1, 3', 'ranks 0-511, 513': jobs have thousands of ranks, so runs collapse."""
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    parts = [f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs]
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(parts)


_FIELD_WORDS = {
    "input_sizes": "input sizes", "output_sizes": "output sizes",
    "input_dtypes": "input dtype", "output_dtypes": "output dtype",
}


def _mismatch_text(m: Mismatch, label: str, same_seq: list[Mismatch]) -> str:
    majority = next(g for g in m.values if g.value == m.expected)
    odd = "; ".join(
        f"{_ranks_text(g.ranks)} {'called' if m.field == 'op' else 'passed ' + _FIELD_WORDS[m.field]} {g.value}"
        for g in m.values if g.value != m.expected
    )
    if m.field == "op":
        return f"At collective #{m.seq} on {label}, {odd} where {_ranks_text(majority.ranks)} called {m.expected}."
    # all_reduce writes in place, so a bad input shows up as a bad output too: say so once
    also = [_FIELD_WORDS[x.field] for x in same_seq if x is not m]
    plural = len(also) > 1 or (also and also[0].endswith("sizes"))
    tail = f"; the {' and '.join(also)} differ{'' if plural else 's'} too" if also else ""
    return f"At {m.op} #{m.seq} on {label}, {odd} where {_ranks_text(majority.ranks)} passed {m.expected}{tail}."


def _last_seen(rank: int, g: GroupReport, progress: tuple[RankProgress, ...]) -> str:
    p = next((p for p in progress if p.rank == rank and p.pg_name == g.pg_name), None)
    if p is None or p.last_enqueued is None or p.last_enqueued < 1:
        return f"rank {rank} recorded nothing on this group"
    op = f"{p.last_enqueued_op} " if p.last_enqueued_op else "collective "
    return f"rank {rank}'s last there was {op}#{p.last_enqueued}"


def _summary(groups: tuple[GroupReport, ...], ranks: list[int], progress: tuple[RankProgress, ...]) -> str:
    if not ranks:
        return "No flight recorder dump with a rank in its file name, so nothing to compare."
    sentences = []
    for g in groups:
        label = _pg_label(g.pg_name, g.pg_desc)
        if g.first_incomplete:
            inc = g.first_incomplete
            sentences.append(
                f"{_ranks_text(inc.missing).capitalize()} never joined {inc.op} #{inc.seq} on {label}; "
                f"{_ranks_text(inc.joined)} {'is' if len(inc.joined) == 1 else 'are'} waiting in it "
                f"(state {', '.join(inc.states)}); "
                + "; ".join(_last_seen(r, g, progress) for r in inc.missing[:3])
                + ("; ..." if len(inc.missing) > 3 else "") + "."
            )
        if g.mismatches:
            first = g.mismatches[0]
            same_seq = [m for m in g.mismatches if m.seq == first.seq and m.odd_ranks == first.odd_ranks]
            later = len({m.seq for m in g.mismatches if m.seq != first.seq})
            sentences.append(_mismatch_text(first, label, same_seq)
                             + (f" Ranks disagree again at {later} later collective{'s' if later > 1 else ''}."
                                if later else ""))
        if g.ranks_without_dump:
            sentences.append(f"No dump from {_ranks_text(g.ranks_without_dump)} of {label}, so what "
                             f"{'it' if len(g.ranks_without_dump) == 1 else 'they'} did there is unknown.")
    if sentences:
        return " ".join(sentences)
    if not any(g.first_seq is not None for g in groups):
        return f"The dumps of {_ranks_text(ranks)} record no collectives."
    spans = ", ".join(f"{_pg_label(g.pg_name, g.pg_desc)} #{g.first_seq}-#{g.last_seq}"
                      if g.first_seq != g.last_seq else f"{_pg_label(g.pg_name, g.pg_desc)} #{g.first_seq}"
                      for g in groups)
    return (f"All {len(ranks)} ranks ({', '.join(map(str, ranks))}) agree on every recorded collective ({spans}): "
            "no missing ranks and no mismatched ops, sizes or dtypes.")


def report_to_dict(report: FlightReport) -> dict:
    """Plain JSON-ready data for `--json` output."""
    data = asdict(report)  # (records inside, such as tracebacks.Frame, too)
    data["healthy"] = report.healthy
    return data
