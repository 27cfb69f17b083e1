"""kb.record: the dataclass behaviour the catalogue and the engine rely on, without dataclasses' start-up cost."""
from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from gpudoctor.kb.record import FrozenInstanceError, asdict, field, fields, record, replace


@record(frozen=True)
class Point:
    x: int
    y: int = 0
    tags: list = field(default_factory=list)
    note: str = field(default="", compare=False, repr=False)


@record
class Counter:
    name: str
    count: int = 0


@record(frozen=True)
class Path:
    points: tuple[Point, ...]


@dataclasses.dataclass(frozen=True)
class Holder:  # a dataclass holding records, as flight reports hold tracebacks.Frame
    path: Path


def test_init_takes_positional_and_keyword_arguments_with_defaults():
    p = Point(1, tags=["a"])
    assert (p.x, p.y, p.tags, p.note) == (1, 0, ["a"], "")
    with pytest.raises(TypeError):
        Point()
    with pytest.raises(TypeError):
        Point(1, nope=2)
    assert fields(Point) == fields(p) == ("x", "y", "tags", "note")


def test_each_instance_gets_its_own_default_from_a_factory():
    a, b = Point(1), Point(1)
    a.tags.append("x")
    assert b.tags == []


def test_equality_hash_and_repr_follow_the_field_options():
    assert Point(1, 2) == Point(1, 2, note="other")  # compare=False
    assert Point(1, 2) != Point(1, 3)
    assert hash(Point(1, 2, ("t",))) == hash(Point(1, 2, ("t",)))
    assert repr(Point(1, 2)) == "Point(x=1, y=2, tags=[])"  # repr=False hides note
    assert Point(1) != (1, 0, [])
    with pytest.raises(TypeError):
        hash(Counter("c"))  # mutable records do not hash, as mutable dataclasses


def test_frozen_refuses_assignment_and_mutable_allows_it():
    p = Point(1)
    with pytest.raises(FrozenInstanceError):
        p.x = 2
    with pytest.raises(AttributeError):
        del p.y
    c = Counter("c")
    c.count += 1
    assert c.count == 1


def test_replace_copies_records_and_dataclasses():
    p = Point(1, 2, ["t"], note="n")
    q = replace(p, y=5)
    assert (q.x, q.y, q.tags, q.note) == (1, 5, ["t"], "n") and p.y == 2
    with pytest.raises(TypeError):
        replace(p, z=1)
    h = replace(Holder(Path(())), path=Path((p,)))
    assert h.path.points == (p,)


def test_asdict_recurses_through_records_dataclasses_and_containers():
    h = Holder(Path((Point(1), Point(2, tags=[{"k": Point(3)}]))))
    data = asdict(h)
    assert data == {"path": {"points": (
        {"x": 1, "y": 0, "tags": [], "note": ""},
        {"x": 2, "y": 0, "tags": [{"k": {"x": 3, "y": 0, "tags": [], "note": ""}}], "note": ""},
    )}}


def test_pickle_and_copy_round_trip():
    p = Point(1, 2, ["t"], "n")
    for clone in (pickle.loads(pickle.dumps(p)), copy.copy(p), copy.deepcopy(p)):
        assert clone == p and clone.note == "n"
    # an instance whose dict lacks a defaulted field (engine.prefix builds them so) reads the default
    bare = object.__new__(Point)
    object.__setattr__(bare, "__dict__", {"x": 7, "tags": []})
    assert bare == Point(7) and replace(bare, x=8) == Point(8)


def test_field_order_and_inheritance_mistakes_fail_at_definition():
    with pytest.raises(TypeError, match="without a default"):
        @record
        class Bad:
            a: int = 1
            b: int

    with pytest.raises(TypeError, match="extend"):
        @record
        class Sub(Point):
            z: int = 0


def test_the_diagnose_modules_define_records_not_dataclasses():
    from gpudoctor.engine import diagnose, findings, patterns, prefix, sources, tracebacks
    from gpudoctor.kb import catalog, model

    for cls in (model.Entry, model.Signature, catalog.Catalog, findings.Finding, findings.Evidence, patterns.Pattern,
                sources.Source, prefix.LinePrefix, tracebacks.Frame, diagnose.Diagnosis):
        assert not dataclasses.is_dataclass(cls) and fields(cls), cls
