"""Flight recorder dumps: reading (pickle, JSON, gzip, hostile and broken files) and cross-rank analysis."""
from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudoctor.engine.flight import (
    Dump,
    FlightError,
    analyze,
    load_dump,
    looks_like_dump,
    parse_dump,
    rank_from_path,
    report_to_dict,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "flight"
SCENARIOS = ["healthy", "missing_rank", "size_mismatch", "shape_mismatch", "dtype_mismatch", "op_mismatch",
             "skip_and_dtype"]


def dump_files(scenario: str, variant: str = "") -> list[Path]:
    folder = DATA / scenario / variant if variant else DATA / scenario
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name.startswith("nccl_trace_rank_"))
    assert len(files) == 4, files
    return files


def load_all(scenario: str, variant: str = "") -> list[Dump]:
    return [load_dump(p) for p in dump_files(scenario, variant)]


def default_pg(report):
    return next(g for g in report.groups if g.pg_desc == "default_pg")


# --- sniffing and loading the real dumps ---------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["", "json", "gz"])
def test_real_dumps_are_recognised(variant):
    scenarios = ["missing_rank"] if variant == "gz" else SCENARIOS
    for scenario in scenarios:
        for path in dump_files(scenario, variant):
            assert looks_like_dump(path.read_bytes()[:4096]), path


@pytest.mark.parametrize("head", [
    b"",
    b"[rank0]: RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970\n",
    b'{"name": "gpudoctor", "version": "0.1"}',
    pickle.dumps({"version": "1.0", "weights": [1, 2]}, protocol=2),
    b"\x1f\x8b\x08\x00garbage",
    b"\x89PNG\r\n\x1a\n",
])
def test_other_files_are_not_dumps(head):
    assert not looks_like_dump(head)


def test_pickle_dump_fields():
    dump = load_dump(DATA / "missing_rank" / "nccl_trace_rank_0")
    assert (dump.rank, dump.format, dump.compressed, dump.version) == (0, "pickle", False, "2.10")
    first = dump.entries[0]
    assert (first.pg_name, first.pg_desc, first.collective_seq_id, first.op) == ("0", "default_pg", 1, "all_reduce")
    assert first.profiling_name == "gloo:all_reduce"
    assert first.input_sizes == ((16,),) and first.input_dtypes == ("Float",)
    assert first.frames and first.frames[0].function == "all_reduce"
    assert {s.pg_id for s in dump.pg_status} == {"0", "1"}


def test_json_and_pickle_dumps_agree():
    for scenario in SCENARIOS:
        for pkl, js in zip(load_all(scenario), load_all(scenario, "json"), strict=True):
            assert js.format == "json" and js.rank == pkl.rank
            strip = [(e.pg_name, e.collective_seq_id, e.profiling_name, e.input_sizes, e.output_dtypes, e.state)
                     for e in pkl.entries]
            assert strip == [(e.pg_name, e.collective_seq_id, e.profiling_name, e.input_sizes, e.output_dtypes,
                              e.state) for e in js.entries]
            # the JSON writer stores counters as strings; they must come back as numbers. (last_completed can
            # differ: the generator dumps JSON a moment after the pickle, while gloo retires the timed-out op.)
            assert [(s.pg_id, s.last_enqueued) for s in js.pg_status] == [
                (s.pg_id, s.last_enqueued) for s in pkl.pg_status]
            assert all(isinstance(s.last_completed, int) for s in js.pg_status)


def test_gzip_dumps_read_like_plain_ones():
    plain = analyze(load_all("missing_rank"))
    zipped_dumps = load_all("missing_rank", "gz")
    assert all(d.compressed and d.format == "pickle" for d in zipped_dumps)
    assert [d.rank for d in zipped_dumps] == [0, 1, 2, 3]
    assert analyze(zipped_dumps).groups == plain.groups


def test_gzipped_json(tmp_path):
    src = DATA / "dtype_mismatch" / "json" / "nccl_trace_rank_1.json"
    target = tmp_path / "trace_1.json.gz"
    target.write_bytes(gzip.compress(src.read_bytes()))
    dump = load_dump(target)
    assert (dump.rank, dump.format, dump.compressed) == (1, "json", True)
    assert dump.entries[-1].input_dtypes == ("Int",)


@pytest.mark.parametrize("name, rank", [
    ("nccl_trace_rank_3", 3), ("trace_12.json.gz", 12), ("rank7.pkl", 7), ("dump.json", None), ("fr", None),
])
def test_rank_from_file_name(name, rank):
    assert rank_from_path(f"/tmp/x/{name}") == rank


def test_rank_override(tmp_path):
    target = tmp_path / "latest.pkl"
    target.write_bytes((DATA / "healthy" / "nccl_trace_rank_2").read_bytes())
    assert load_dump(target).rank is None
    assert load_dump(target, rank=2).rank == 2


# --- hostile and broken files ---------------------------------------------------------------------------------

class _RunsShell:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _RunsPython:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


@pytest.mark.parametrize("payload_cls, global_name", [(_RunsShell, "system"), (_RunsPython, "exec")])
def test_malicious_pickle_is_refused_and_never_runs(tmp_path, payload_cls, global_name):
    marker = tmp_path / "pwned"
    # first prove the payload is live: plain pickle really would run it
    pickle.loads(pickle.dumps(payload_cls(marker), protocol=2))
    assert marker.exists()
    marker.unlink()

    evil = tmp_path / "nccl_trace_rank_0"
    evil.write_bytes(pickle.dumps({"version": "2.10", "pg_config": {}, "entries": [payload_cls(marker)]}, protocol=2))
    assert looks_like_dump(evil.read_bytes())  # it passes the sniff; the loader must still stop it
    with pytest.raises(FlightError) as info:
        load_dump(evil)
    assert not marker.exists()
    message = str(info.value)
    assert str(evil) in message and "refused" in message and global_name in message


def test_malicious_gzipped_pickle_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "nccl_trace_rank_1.gz"
    evil.write_bytes(gzip.compress(pickle.dumps(_RunsPython(marker), protocol=4)))
    with pytest.raises(FlightError, match="refused"):
        load_dump(evil)
    assert not marker.exists()


def test_persistent_ids_are_refused(tmp_path):
    class Pers(pickle.Pickler):
        def persistent_id(self, obj):
            return "ext" if obj == "x" else None

    import io
    buf = io.BytesIO()
    Pers(buf, protocol=2).dump({"entries": ["x"]})
    target = tmp_path / "nccl_trace_rank_0"
    target.write_bytes(buf.getvalue())
    with pytest.raises(FlightError, match="refused.*persistent id"):
        load_dump(target)


@pytest.mark.parametrize("source", ["nccl_trace_rank_0", "json/nccl_trace_rank_0.json", "gz/nccl_trace_rank_0.gz"])
def test_truncated_dump_is_a_clear_error(tmp_path, source):
    data = (DATA / "missing_rank" / source).read_bytes()
    target = tmp_path / Path(source).name
    target.write_bytes(data[: len(data) // 2])
    with pytest.raises(FlightError, match="truncated") as info:
        load_dump(target)
    assert info.value.path == str(target)


@pytest.mark.parametrize("content, message", [
    (b"", "empty file"),
    (b"hello world\n", "neither a pickle nor a JSON"),
    (b"[1, 2, 3]", "neither a pickle nor a JSON"),
    (b'{"version": "2.10"}', "not a flight recorder dump"),
    (pickle.dumps([1, 2], protocol=2), "top level is a list"),
    (b'{"entries": [{"process_group": ["0", "default_pg"], "profiling_name": "nccl:all_reduce"}]}',
     r"entries\[0\]: missing 'collective_seq_id'"),
    (b'{"entries": [{"process_group": ["0", ""], "profiling_name": "nccl:x", "collective_seq_id": "seven"}]}',
     r"entries\[0\]\.collective_seq_id: expected an integer, got 'seven'"),
    (b'{"entries": [], "pg_status": {"0": {"last_enqueued_collective": [3]}}}',
     r"pg_status\['0'\]\.last_enqueued_collective: expected an integer, got a list"),
    (b"\xff\xfe{\x00", "neither a pickle nor a JSON"),
])
def test_not_a_dump(tmp_path, content, message):
    target = tmp_path / "nccl_trace_rank_0"
    target.write_bytes(content)
    with pytest.raises(FlightError, match=message):
        load_dump(target)


def test_unreadable_paths(tmp_path):
    with pytest.raises(FlightError, match="cannot read"):
        load_dump(tmp_path / "nope_0")
    with pytest.raises(FlightError, match="cannot read"):
        load_dump(tmp_path)


def test_gzip_bomb_is_cut_off(tmp_path, monkeypatch):
    import gpudoctor.engine.flight_load as flight_load

    monkeypatch.setattr(flight_load, "MAX_DUMP_BYTES", 10_000)
    target = tmp_path / "nccl_trace_rank_0.gz"
    target.write_bytes(gzip.compress(b"{" + b" " * 50_000 + b"}"))
    with pytest.raises(FlightError, match="decompresses to more than"):
        load_dump(target)


REAL_BYTES = [(DATA / "missing_rank" / "nccl_trace_rank_0").read_bytes(),
              (DATA / "missing_rank" / "json" / "nccl_trace_rank_0.json").read_bytes(),
              (DATA / "missing_rank" / "gz" / "nccl_trace_rank_0.gz").read_bytes()]


@st.composite
def damaged_dumps(draw):
    data = bytearray(draw(st.sampled_from(REAL_BYTES)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data) - 1))
        data[at] = draw(st.integers(0, 255))
    return bytes(data[: draw(st.integers(0, len(data)))])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
entry_like = st.fixed_dictionaries(
    {"process_group": st.one_of(st.just(["0", "default_pg"]), json_values),
     "collective_seq_id": st.one_of(st.integers(-3, 5), json_values),
     "profiling_name": st.one_of(st.just("nccl:all_reduce"), json_values)},
    optional={"input_sizes": json_values, "input_dtypes": json_values, "state": json_values,
              "is_p2p": json_values, "pg_id": json_values, "frames": json_values},
)
structured = st.fixed_dictionaries(
    {"entries": st.lists(entry_like, max_size=4)},
    optional={"pg_status": json_values, "pg_config": json_values, "version": json_values},
).flatmap(lambda d: st.sampled_from([json.dumps(d).encode(), pickle.dumps(d, protocol=2),
                                      gzip.compress(pickle.dumps(d, protocol=4))]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=300), st.binary(max_size=64).map(lambda b: b"\x80\x02" + b),
                      st.binary(max_size=64).map(lambda b: b"\x1f\x8b" + b), damaged_dumps(), structured))
def test_load_dump_on_any_bytes_raises_only_flight_error(tmp_path, data):
    target = tmp_path / "nccl_trace_rank_5"
    target.write_bytes(data)
    looks_like_dump(data[:4096])  # must not raise either
    try:
        dump = load_dump(target)
    except FlightError as exc:
        assert exc.path == str(target)
        return
    # whatever parses must also analyze cleanly
    report = analyze([dump, parse_dump(data, "nccl_trace_rank_6")])
    json.dumps(report_to_dict(report))


# --- analysis of the real dumps ---------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["", "json"])
def test_healthy(variant):
    report = analyze(load_all("healthy", variant))
    assert report.healthy and report.ranks == (0, 1, 2, 3)
    pair = next(g for g in report.groups if g.pg_desc == "pair")
    assert pair.members == (0, 1) and pair.membership == "seen_in_entries"
    assert (default_pg(report).first_seq, default_pg(report).last_seq) == (1, 3)
    assert report.summary.startswith("All 4 ranks (0, 1, 2, 3) agree on every recorded collective")


@pytest.mark.parametrize("variant", ["", "json", "gz"])
def test_missing_rank(variant):
    report = analyze(load_all("missing_rank", variant))
    pg = default_pg(report)
    inc = pg.first_incomplete
    assert (inc.seq, inc.op, inc.joined, inc.missing) == (3, "all_reduce", (0, 1, 3), (2,))
    assert pg.mismatches == () and not report.healthy
    assert report.summary.startswith(
        "Rank 2 never joined all_reduce #3 on pg 0 (default_pg); ranks 0, 1, 3 are waiting in it")
    assert "rank 2's last there was broadcast #2" in report.summary
    rank2 = next(p for p in report.progress if p.rank == 2 and p.pg_name == "0")
    assert (rank2.last_enqueued, rank2.last_enqueued_op, rank2.source) == (2, "broadcast", "pg_status")
    # the [0, 1] subgroup is fine: rank 2 is not a member of it
    pair = next(g for g in report.groups if g.pg_desc == "pair")
    assert pair.first_incomplete is None and pair.members == (0, 1)


@pytest.mark.parametrize("scenario, odd, field, expected, odd_value", [
    ("size_mismatch", (3,), "input_sizes", "[16]", "[32]"),
    ("shape_mismatch", (3,), "input_sizes", "[16]", "[4, 4]"),
    ("dtype_mismatch", (1,), "input_dtypes", "Float", "Int"),
    ("op_mismatch", (1,), "op", "all_reduce", "broadcast"),
])
@pytest.mark.parametrize("variant", ["", "json"])
def test_mismatches(scenario, odd, field, expected, odd_value, variant):
    report = analyze(load_all(scenario, variant))
    pg = default_pg(report)
    assert pg.first_incomplete is None
    first = pg.mismatches[0]
    assert (first.seq, first.field, first.expected, first.odd_ranks) == (3, field, expected, odd)
    assert [g.value for g in first.values if g.ranks == odd] == [odd_value]
    if field == "op":
        assert len(pg.mismatches) == 1  # sizes of different ops are not compared
    else:
        # all_reduce is in place: the output side disagrees the same way, and the summary says it once
        assert [m.field for m in pg.mismatches] == [field, field.replace("input", "output")]
        assert "too." in report.summary
    assert f"{'rank ' + str(odd[0])} " in report.summary and not report.healthy


def test_skip_and_dtype_reports_both():
    report = analyze(load_all("skip_and_dtype"))
    pg = default_pg(report)
    assert pg.first_incomplete.missing == (2,)
    assert pg.mismatches[0].field == "input_dtypes" and pg.mismatches[0].odd_ranks == (1,)
    assert "Rank 2 never joined" in report.summary and "rank 1 passed input dtype Int" in report.summary


def test_report_to_dict_is_json_ready():
    data = json.loads(json.dumps(report_to_dict(analyze(load_all("missing_rank")))))
    assert data["healthy"] is False and data["ranks"] == [0, 1, 2, 3]
    assert data["groups"][0]["first_incomplete"]["missing"] == [2]
    assert data["summary"].startswith("Rank 2 never joined")
    mism = report_to_dict(analyze(load_all("dtype_mismatch")))["groups"][0]["mismatches"][0]
    assert json.loads(json.dumps(mism))["values"] == [{"value": "Float", "ranks": [0, 2, 3]},
                                                       {"value": "Int", "ranks": [1]}]


def test_unranked_and_duplicate_dumps_become_notes(tmp_path):
    plain = tmp_path / "latest.pkl"
    plain.write_bytes((DATA / "healthy" / "nccl_trace_rank_0").read_bytes())
    dumps = load_all("healthy") + [load_dump(plain), load_dump(DATA / "healthy" / "json" / "nccl_trace_rank_1.json")]
    report = analyze(dumps)
    assert report.healthy and report.ranks == (0, 1, 2, 3)
    assert any("no rank number" in n for n in report.notes)
    assert any("second dump for rank 1" in n for n in report.notes)


def test_no_dumps():
    report = analyze([])
    assert report.ranks == () and report.groups == () and "nothing to compare" in report.summary


# --- analysis of NCCL-shaped dumps built here (no GPU on this machine; fields as torch's writer names them) ---

def nccl_entry(seq, op="all_reduce", pg=("0", "default_pg"), pg_id=0, sizes=((1024,),), dtype="Float",
               out_sizes=None, state="completed", op_id=None, record_id=0):
    return {
        "record_id": record_id, "pg_id": pg_id, "process_group": pg, "collective_seq_id": seq, "p2p_seq_id": 0,
        "op_id": op_id if op_id is not None else seq, "profiling_name": f"nccl:{op}", "time_created_ns": 10**18 + seq,
        "input_sizes": [list(s) for s in sizes], "input_dtypes": [dtype] * len(sizes),
        "output_sizes": [list(s) for s in (sizes if out_sizes is None else out_sizes)],
        "output_dtypes": [dtype] * len(sizes if out_sizes is None else out_sizes),
        "state": state, "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
        "retired": state == "completed", "timeout_ms": 600000, "is_p2p": op in ("send", "recv"), "frames": [],
    }


def nccl_dump(rank, entries, world=8, status=None):
    raw = {"version": "2.10", "comm_lib_version": "2.21.5",
           "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}},
           "entries": entries}
    if status is not None:
        raw["pg_status"] = status
    return parse_dump(pickle.dumps(raw, protocol=2), f"/dumps/nccl_trace_rank_{rank}")


def test_partial_dumps_name_the_ranks_without_one():
    dumps = [nccl_dump(r, [nccl_entry(1), nccl_entry(2, state="started" if r else "scheduled")]) for r in range(4)]
    report = analyze(dumps)
    pg = default_pg(report)
    assert pg.membership == "pg_config" and pg.members == tuple(range(8))
    assert pg.ranks_without_dump == (4, 5, 6, 7) and pg.first_incomplete is None
    assert "No dump from ranks 4-7 of pg 0 (default_pg)" in report.summary
    rank1 = next(p for p in report.progress if p.rank == 1)
    assert (rank1.last_enqueued, rank1.last_started, rank1.last_completed, rank1.source) == (2, 2, 1, "entries")


def test_nccl_missing_rank_with_states():
    dumps = [nccl_dump(r, [nccl_entry(56), nccl_entry(57, state="started")] if r != 2 else [nccl_entry(56)],
                       world=4) for r in range(4)]
    report = analyze(dumps)
    assert report.summary.startswith(
        "Rank 2 never joined all_reduce #57 on pg 0 (default_pg); ranks 0, 1, 3 are waiting in it (state started)")


def test_ring_buffer_eviction_is_not_a_missing_rank():
    # rank 1's buffer wrapped and kept only #5-#6; rank 0 still holds #1-#6
    dumps = [nccl_dump(0, [nccl_entry(s) for s in range(1, 7)], world=2),
             nccl_dump(1, [nccl_entry(s) for s in range(5, 7)], world=2)]
    assert analyze(dumps).healthy


def test_pg_status_counts_as_reaching_a_collective():
    # onlyActive dumps leave out completed work; pg_status still says rank 1 got to #3
    status = {"0": {"last_enqueued_collective": 3, "last_started_collective": 3, "last_completed_collective": 3}}
    dumps = [nccl_dump(0, [nccl_entry(3, state="started")], world=2),
             nccl_dump(1, [], world=2, status=status)]
    assert default_pg(analyze(dumps)).first_incomplete is None


def test_gather_root_and_coalesced_ops_are_not_mismatches():
    root = [nccl_entry(1, "gather", sizes=((4,),), out_sizes=((4,), (4,))),
            nccl_entry(2, "all_reduce", op_id=2), nccl_entry(2, "all_reduce", sizes=((8,),), op_id=3)]
    other = [nccl_entry(1, "gather", sizes=((4,),), out_sizes=()),
             nccl_entry(2, "all_reduce", op_id=2), nccl_entry(2, "all_reduce", sizes=((8,),), op_id=3)]
    assert analyze([nccl_dump(0, root, world=2), nccl_dump(1, other, world=2)]).healthy


def test_subgroups_are_matched_separately_and_p2p_is_noted():
    tp = ("3", "tp")
    cfg = lambda r: {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},  # noqa: E731
                     "3": {"name": "3", "desc": "tp", "ranks": "[0, 1]" if r < 2 else "[2, 3]"}}
    dumps = []
    for r in range(4):
        entries = [nccl_entry(1), nccl_entry(1, pg=tp, pg_id=3, sizes=((64,),) if r != 3 else ((32,),)),
                   {**nccl_entry(1, "send 0->1", pg=tp, pg_id=3), "is_p2p": True}]
        raw = {"version": "2.10", "pg_config": cfg(r), "entries": entries}
        dumps.append(parse_dump(json.dumps(raw).encode(), f"nccl_trace_rank_{r}"))
    report = analyze(dumps)
    tp_groups = [g for g in report.groups if g.pg_desc == "tp"]
    assert [g.members for g in tp_groups] == [(0, 1), (2, 3)]
    assert tp_groups[0].mismatches == () and tp_groups[1].mismatches[0].odd_ranks == (3,)
    assert any("send/recv" in n for n in report.notes)


def test_flight_modules_do_not_import_torch():
    code = "import sys, gpudoctor.engine.flight; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
