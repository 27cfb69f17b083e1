"""Record classes, the part of `dataclasses` the catalogue and the engine use, at a fraction of its start-up cost.

`dataclasses` imports `inspect` (several milliseconds) and generates five or six functions per class by
compiling source text; `diagnose` defines two dozen records on every run, which cost it about a third of its
start-up. Here a class gets one generated `__init__` (fast to call, the usual signature and errors) and
shared `__eq__`, `__hash__` and `__repr__`. What it supports, all that this project's records use: fields from
the class's own annotations in order, plain defaults, `field(default_factory=..., repr=..., compare=...)`,
`frozen=True` (assignment raises FrozenInstanceError), `replace()`, `fields()`. Instances keep a `__dict__`, so
they pickle, copy and compare as dataclasses do. Records that need more (ordering, inheritance, `__post_init__`,
slots) stay dataclasses.
"""
from __future__ import annotations

from operator import attrgetter

__all__ = ["FrozenInstanceError", "asdict", "field", "fields", "record", "replace"]

_MISSING = object()


class FrozenInstanceError(AttributeError):
    """An assignment to a field of a frozen record."""


class field:  # noqa: N801 - read as dataclasses.field
    """A field's default and options, given as the class attribute: `x: list = field(default_factory=list)`."""

    __slots__ = ("default", "default_factory", "repr", "compare")

    def __init__(self, *, default=_MISSING, default_factory=_MISSING, repr: bool = True,  # noqa: A002
                 compare: bool = True):
        if default is not _MISSING and default_factory is not _MISSING:
            raise ValueError("cannot give both default and default_factory")
        self.default, self.default_factory, self.repr, self.compare = default, default_factory, repr, compare


def record(cls=None, /, *, frozen: bool = False):
    """Class decorator: `@record` or `@record(frozen=True)`."""

    def wrap(klass):
        return _build(klass, frozen)

    return wrap if cls is None else wrap(cls)


def fields(obj_or_cls) -> tuple[str, ...]:
    """The field names of a record class or instance, in order."""
    return (obj_or_cls if isinstance(obj_or_cls, type) else type(obj_or_cls)).__record_fields__


def replace(obj, /, **changes):
    """A copy of a record (or of a dataclass) with some fields changed, made through its __init__."""
    names = getattr(type(obj), "__record_fields__", None)
    if names is None:
        import dataclasses

        return dataclasses.replace(obj, **changes)
    for name in names:
        if name not in changes:
            changes[name] = getattr(obj, name)
    return type(obj)(**changes)


def asdict(obj):
    """Plain data for JSON: records and dataclasses become dicts, recursively through lists, tuples and dicts."""
    names = getattr(type(obj), "__record_fields__", None)
    if names is not None:
        return {name: asdict(getattr(obj, name)) for name in names}
    if hasattr(type(obj), "__dataclass_fields__"):
        import dataclasses

        return {f.name: asdict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a named tuple
        return type(obj)(*map(asdict, obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(asdict(x) for x in obj)
    if isinstance(obj, dict):
        return {asdict(k): asdict(v) for k, v in obj.items()}
    return obj


def _build(cls, frozen: bool):
    if any(hasattr(base, "__record_fields__") for base in cls.__mro__[1:]):
        raise TypeError(f"{cls.__name__}: a record cannot extend another record")
    specs: list[tuple[str, object, object, bool, bool]] = []  # name, default, factory, repr, compare
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if str(annotation).startswith(("ClassVar", "typing.ClassVar")):
            continue
        value = cls.__dict__.get(name, _MISSING)
        if isinstance(value, field):
            specs.append((name, value.default, value.default_factory, value.repr, value.compare))
            if value.default is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, value.default)  # read by instances whose __dict__ lacks it, as dataclasses do
        else:
            specs.append((name, value, _MISSING, True, True))
    with_default = [s[1] is not _MISSING or s[2] is not _MISSING for s in specs]
    if any(a and not b for a, b in zip(with_default, with_default[1:])):
        first = next(s[0] for i, s in enumerate(specs) if i and with_default[i - 1] and not with_default[i])
        raise TypeError(f"{cls.__name__}: field {first!r} without a default follows one with a default")
    names = tuple(s[0] for s in specs)
    cls.__record_fields__ = names
    cls.__match_args__ = names
    cls.__init__ = _first_init(cls, specs)
    compared = tuple(s[0] for s in specs if s[4])
    shown = tuple(s[0] for s in specs if s[3])
    key = (lambda obj: ()) if not compared else _tuple_getter(compared)
    own = cls.__dict__
    if "__repr__" not in own:
        def __repr__(self) -> str:
            return f"{type(self).__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in shown)})"

        cls.__repr__ = __repr__
    if "__eq__" not in own:
        def __eq__(self, other):
            if other.__class__ is self.__class__:
                return key(self) == key(other)
            return NotImplemented

        cls.__eq__ = __eq__
    if "__hash__" not in own:  # as dataclasses: frozen records hash their compared fields, mutable ones do not hash
        if frozen:
            cls.__hash__ = lambda self: hash(key(self))
        else:
            cls.__hash__ = None
    if frozen:
        if "__setattr__" in own or "__delattr__" in own:
            raise TypeError(f"{cls.__name__}: a frozen record cannot define __setattr__ or __delattr__")

        def __setattr__(self, name, value):
            raise FrozenInstanceError(f"cannot assign to field {name!r}")

        def __delattr__(self, name):
            raise FrozenInstanceError(f"cannot delete field {name!r}")

        cls.__setattr__, cls.__delattr__ = __setattr__, __delattr__
    return cls


def _tuple_getter(names: tuple[str, ...]):
    get = attrgetter(*names)
    return get if len(names) > 1 else (lambda obj: (get(obj),))


def _first_init(cls, specs):
    """An __init__ that generates the real one on the first call: classes that only ever come out of a
    pickle (the catalogue's) never pay for compiling it."""

    def __init__(self, *args, **kwargs):
        init = cls.__init__ = _make_init(cls, specs)
        init(self, *args, **kwargs)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _make_init(cls, specs):
    """One generated __init__ per class: the usual signature, fields stored straight into the instance dict."""
    namespace: dict = {"_MISSING": _MISSING}
    params, body = [], []
    for i, (name, default, factory, _repr, _compare) in enumerate(specs):
        if factory is not _MISSING:
            namespace[f"_factory{i}"] = factory
            params.append(f"{name}=_MISSING")
            body.append(f"    _record_dict[{name!r}] = _factory{i}() if {name} is _MISSING else {name}")
            continue
        if default is _MISSING:
            params.append(name)
        else:
            namespace[f"_default{i}"] = default
            params.append(f"{name}=_default{i}")
        body.append(f"    _record_dict[{name!r}] = {name}")
    source = f"def __init__(self, {', '.join(params)}):\n    _record_dict = self.__dict__\n" + "\n".join(body) + "\n"
    if not specs:
        source = "def __init__(self):\n    pass\n"
    try:
        exec(source, namespace)  # noqa: S102 - source built above from the class's own field names
    except SyntaxError as exc:  # e.g. a field without a default after one with a default
        raise TypeError(f"{cls.__name__}: {exc.msg}") from None
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    return init
