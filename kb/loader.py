"""Turn catalogue YAML files into validated Entry objects, naming the file and field of every error."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gpudoctor.kb.model import (
    FIX_FACTS,
    FIX_TRANSFORMS,
    SECTIONS,
    WITNESS_PREFIXES,
    Entry,
    FixAction,
    FixFor,
    FixStep,
    Pointer,
    Reference,
    Related,
)
from gpudoctor.kb.signature_fields import SLUG_RE, parse_signatures

ID_RE = re.compile(r"^[A-Z]+[0-9]+$")
FIX_KINDS = ("env", "command", "patch", "config")
FIX_SAFETY = ("safe", "unsafe", "display-only")

_FIELDS = {
    "id", "title", "section", "summary", "symptoms", "cause", "fix_summary", "fix",
    "log_visibility", "log_visibility_note", "error_strings", "keywords", "paraphrases", "signatures", "fix_for",
    "probes", "fix_actions", "related", "explains", "see_also", "references",
}
_REQUIRED = ("id", "title", "section", "summary", "symptoms", "cause", "fix_summary", "fix", "log_visibility")


class KBError(Exception):
    """A problem in one catalogue file, located by file and field."""

    def __init__(self, source: str, where: str, message: str):
        self.source, self.where, self.message = source, where, message
        self.more: list[KBError] = []  # the file's other problems, found in the same pass
        super().__init__(f"{source}: {where}: {message}" if where else f"{source}: {message}")

    def all(self) -> list[KBError]:
        return [self, *self.more]


def _yaml_load(text: str) -> Any:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader


class _Checker:
    """Small typed accessors that raise KBError with a field path."""

    def __init__(self, source: str):
        self.source = source
        self.problems: list[KBError] = []  # problems noted so far; parsing goes on to find the others

    def fail(self, where: str, message: str) -> KBError:
        return KBError(self.source, where, message)

    def note(self, where: str, message: str) -> None:
        self.problems.append(self.fail(where, message))

    def soft(self, parse, default):
        """parse(), or the default once its problem is noted."""
        try:
            return parse()
        except KBError as exc:
            self.problems.append(exc)
            return default

    def done(self) -> None:
        """Raise the first problem noted, carrying the others."""
        if self.problems:
            first = self.problems[0]
            first.more = self.problems[1:]
            raise first

    def text(self, value: Any, where: str, *, allow_empty: bool = False) -> str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            raise self.fail(where, f"expected text, got {_kind(value)}")
        value = value.strip()
        if not value and not allow_empty:
            raise self.fail(where, "must not be empty")
        return value

    def texts(self, value: Any, where: str) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.fail(where, f"expected a list, got {_kind(value)}")
        return tuple(self.text(v, f"{where}[{i}]") for i, v in enumerate(value))

    def mapping(self, value: Any, where: str, allowed: set[str], required: tuple[str, ...]) -> dict:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a mapping, got {_kind(value)}")
        for key in value:
            if key not in allowed:
                raise self.fail(f"{where}.{key}", f"unknown field (expected one of: {', '.join(sorted(allowed))})")
        for key in required:
            if key not in value or value[key] is None:
                raise self.fail(f"{where}.{key}", "missing required field")
        return value

    def items(self, value: Any, where: str) -> list:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(where, f"expected a list, got {_kind(value)}")
        return value


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "text", bool: "true/false", type(None): "nothing"}.get(
        type(value), type(value).__name__
    )


def parse_entry(data: Any, source: str, *, origin: str = "builtin") -> Entry:
    """Validate one parsed YAML document and build its Entry."""
    c = _Checker(source)
    if not isinstance(data, dict):
        raise c.fail("", f"expected a mapping of fields at the top level, got {_kind(data)}")
    for key in data:
        if key not in _FIELDS:
            c.note(str(key), "unknown field (see kb/SCHEMA.md)")
    missing = [key for key in _REQUIRED if key not in data or data[key] is None]
    for key in missing:
        c.note(key, "missing required field")
    # stand-ins for the missing fields, so that the others are still checked (the missing ones are not again)
    data = {**data, **{key: [] if key in ("symptoms", "fix") else "-" for key in missing}}

    entry_id = c.soft(lambda: c.text(data["id"], "id"), "X0")
    if "id" not in missing and not ID_RE.match(entry_id):
        c.note("id", f"{entry_id!r} is not an id like D8 or MN3 (capital letters then digits)")
    section = c.soft(lambda: c.text(data["section"], "section"), SECTIONS[0])
    if "section" not in missing and section not in SECTIONS:
        c.note("section", f"unknown section {section!r} (expected one of: {', '.join(SECTIONS)})")
    symptoms = c.soft(lambda: c.texts(data["symptoms"], "symptoms"), ("-",))
    if not symptoms and "symptoms" not in missing:
        c.note("symptoms", "needs at least one symptom")
    visibility = c.soft(lambda: c.text(data["log_visibility"], "log_visibility"), "shows")
    if "log_visibility" not in missing and visibility not in ("shows", "never"):
        c.note("log_visibility", f"expected 'shows' or 'never', got {visibility!r}")
    note = c.soft(lambda: c.text(data.get("log_visibility_note") or "", "log_visibility_note", allow_empty=True), "")
    if visibility == "never" and not note:
        c.note("log_visibility_note", "an entry that never shows in a log must say why")

    steps = []
    for i, raw in enumerate(c.soft(lambda: c.items(data["fix"], "fix"), [])):
        where = f"fix[{i}]"
        step = c.soft(lambda raw=raw, where=where: _fix_step(c, raw, where), None)
        if step is not None:
            steps.append(step)
    if not steps and "fix" not in missing and not any(p.where.startswith("fix[") for p in c.problems):
        c.note("fix", "needs at least one step")

    signatures = c.soft(lambda: parse_signatures(c, data.get("signatures")), ())
    if origin == "user" and signatures:  # a runbook's regexes are matched by RE2, where no line can stall them
        from gpudoctor.kb.linear import unsupported

        for i, sig in enumerate(signatures):
            why = unsupported(sig.pattern) if sig.pattern and sig.literal is None else None
            if why:
                c.note(f"signatures[{i}].regex", f"RE2 cannot match this ({why}): a runbook's signatures are matched "
                       "in linear time, so that no line can stall diagnose; write it without lookarounds or "
                       "backreferences")
    if signatures and visibility == "never":
        c.note("signatures", "an entry with log_visibility: never cannot have signatures")

    fix_actions = c.soft(lambda: _parse_fix_actions(c, data.get("fix_actions")), ())
    fix_for = c.soft(lambda: _parse_fix_for(c, data.get("fix_for"), signatures, len(steps), fix_actions), ())
    texts = {k: c.soft(lambda k=k: c.text(data[k], k), "-") for k in ("title", "summary", "cause", "fix_summary")
             if k not in missing}
    lists = {k: c.soft(lambda k=k: c.texts(data.get(k), k), ()) for k in
             ("error_strings", "keywords", "paraphrases", "probes", "explains")}
    related = c.soft(lambda: tuple(
        Related(id=c.text(r["id"], f"related[{i}].id").upper(), why=c.text(r["why"], f"related[{i}].why"))
        for i, r in enumerate(
            c.mapping(r, f"related[{i}]", {"id", "why"}, ("id", "why"))
            for i, r in enumerate(c.items(data.get("related"), "related"))
        )
    ), ())
    see_also = c.soft(lambda: tuple(
        Pointer(topic=c.text(p["topic"], f"see_also[{i}].topic"), note=c.text(p["note"], f"see_also[{i}].note"))
        for i, p in enumerate(
            c.mapping(p, f"see_also[{i}]", {"topic", "note"}, ("topic", "note"))
            for i, p in enumerate(c.items(data.get("see_also"), "see_also"))
        )
    ), ())
    references = c.soft(lambda: tuple(
        _reference(c, r, i) for i, r in enumerate(c.items(data.get("references"), "references"))
    ), ())
    c.done()

    return Entry(
        id=entry_id,
        title=texts["title"],
        section=section,
        summary=texts["summary"],
        symptoms=symptoms,
        cause=texts["cause"],
        fix_summary=texts["fix_summary"],
        fix=tuple(steps),
        log_visibility=visibility,
        log_visibility_note=note,
        error_strings=lists["error_strings"],
        keywords=lists["keywords"],
        paraphrases=lists["paraphrases"],
        signatures=signatures,
        probes=lists["probes"],
        fix_actions=fix_actions,
        fix_for=fix_for,
        related=related,
        explains=tuple(x.upper() for x in lists["explains"]),
        see_also=see_also,
        references=references,
        source=source,
        origin=origin,
    )


def _fix_step(c: _Checker, raw: Any, where: str) -> FixStep:
    raw = c.mapping(raw, where, {"text", "code", "lang"}, ("text",))
    code = raw.get("code")
    return FixStep(
        text=c.text(raw["text"], f"{where}.text"),
        code=c.text(code, f"{where}.code").rstrip() if code is not None else None,
        lang=c.text(raw["lang"], f"{where}.lang") if raw.get("lang") is not None else None,
    )


def _reference(c: _Checker, raw: Any, i: int) -> Reference:
    where = f"references[{i}]"
    raw = c.mapping(raw, where, {"title", "url"}, ("title", "url"))
    url = c.text(raw["url"], f"{where}.url")
    if not url.startswith(("https://", "http://")):
        raise c.fail(f"{where}.url", f"expected an http(s) address, got {url!r}")
    return Reference(title=c.text(raw["title"], f"{where}.title"), url=url)


def _parse_fix_actions(c: _Checker, raw: Any) -> tuple[FixAction, ...]:
    out = []
    seen: set[str] = set()
    for i, item in enumerate(c.items(raw, "fix_actions")):
        where = f"fix_actions[{i}]"
        if not isinstance(item, dict):
            raise c.fail(where, f"expected a mapping, got {_kind(item)}")
        for key in ("id", "kind", "safety", "title"):
            if item.get(key) is None:
                raise c.fail(f"{where}.{key}", "missing required field")
        action_id = c.text(item["id"], f"{where}.id")
        if action_id in seen:
            raise c.fail(f"{where}.id", f"duplicate fix action id {action_id!r}")
        seen.add(action_id)
        kind = c.text(item["kind"], f"{where}.kind")
        if kind not in FIX_KINDS:
            raise c.fail(f"{where}.kind", f"expected one of {', '.join(FIX_KINDS)}, got {kind!r}")
        safety = c.text(item["safety"], f"{where}.safety")
        if safety not in FIX_SAFETY:
            raise c.fail(f"{where}.safety", f"expected one of {', '.join(FIX_SAFETY)}, got {safety!r}")
        params = _fix_params(c, item, kind, where)
        out.append(FixAction(id=action_id, kind=kind, safety=safety, title=c.text(item["title"], f"{where}.title"), params=params))
    return tuple(out)


def _parse_fix_for(c: _Checker, raw: Any, signatures, steps: int, actions) -> tuple[FixFor, ...]:
    """`fix_for`: which step of `fix` and which `fix_actions` each kind of evidence (signature or rule) calls for."""
    sig_ids = {s.id for s in signatures}
    action_ids = {a.id for a in actions}
    out = []
    for i, item in enumerate(c.items(raw, "fix_for")):
        where = f"fix_for[{i}]"
        item = c.mapping(item, where, {"evidence", "step", "actions"}, ("evidence",))
        evidence = c.texts(item["evidence"], f"{where}.evidence")
        if not evidence:
            raise c.fail(f"{where}.evidence", "name at least one signature or rule")
        for j, ev in enumerate(evidence):
            prefix = next((p for p in WITNESS_PREFIXES if ev.startswith(p)), None)
            if prefix is None and ev not in sig_ids:
                raise c.fail(f"{where}.evidence[{j}]", f"unknown signature id {ev!r} in this entry (a rule or "
                             f"witness id starts with {', '.join(WITNESS_PREFIXES)})")
            if prefix is not None and not SLUG_RE.match(ev[len(prefix):]):
                raise c.fail(f"{where}.evidence[{j}]", f"{ev!r}: expected {prefix}<lower-case words joined by '-'>")
        step = item.get("step", 0)
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= steps:
            raise c.fail(f"{where}.step", f"expected the number of one of the {steps} fix steps (1-{steps}), "
                         f"got {step!r}")
        wanted = c.texts(item.get("actions"), f"{where}.actions")
        for j, action in enumerate(wanted):
            if action not in action_ids:
                raise c.fail(f"{where}.actions[{j}]", f"unknown fix action {action!r} in this entry")
        if not step and not wanted:
            raise c.fail(where, "give a `step`, `actions` or both")
        out.append(FixFor(evidence=evidence, step=step, actions=wanted))
    return tuple(out)


_FIX_KEYS = {"id", "kind", "safety", "title", "why", "defaults", "env", "rewrite", "patch", "config"}
_FIX_TRANSFORM_KEY = {"env": "env", "command": "rewrite", "patch": "patch", "config": "config"}


def _fix_params(c: _Checker, item: dict, kind: str, where: str) -> tuple:
    """The action's parameters: the one transform its kind needs, an optional `why` and fact `defaults`."""
    for key in item:
        if key not in _FIX_KEYS:
            raise c.fail(f"{where}.{key}", f"unknown field (expected one of: {', '.join(sorted(_FIX_KEYS))})")
    own = _FIX_TRANSFORM_KEY[kind]
    for key in _FIX_TRANSFORM_KEY.values():
        if key != own and key in item:
            raise c.fail(f"{where}.{key}", f"not a field of a {kind} action (it takes '{own}')")
    if item.get(own) is None:
        raise c.fail(f"{where}.{own}", f"missing required field for a {kind} action")
    if kind == "env":
        env = item["env"]
        if not isinstance(env, dict) or not env:
            raise c.fail(f"{where}.env", f"expected a mapping of variable names to values, got {_kind(env)}")
        for name, value in env.items():
            if not isinstance(name, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                raise c.fail(f"{where}.env", f"{name!r} is not an environment variable name")
            c.text(value, f"{where}.env.{name}")
            for fact in re.findall(r"\{(\w+)\}", str(value)):
                if fact not in FIX_FACTS:
                    raise c.fail(f"{where}.env.{name}", f"unknown fact {{{fact}}} (known: {', '.join(FIX_FACTS)})")
    else:
        name = c.text(item[own], f"{where}.{own}")
        if name not in FIX_TRANSFORMS[kind]:
            raise c.fail(f"{where}.{own}", f"unknown {own} {name!r} (known: {', '.join(FIX_TRANSFORMS[kind])})")
    if item.get("why") is not None:
        c.text(item["why"], f"{where}.why")
    if item.get("safety") != "safe" and not item.get("why"):
        raise c.fail(f"{where}.why", "an unsafe or display-only action must say why")
    defaults = item.get("defaults")
    if defaults is not None:
        if not isinstance(defaults, dict):
            raise c.fail(f"{where}.defaults", f"expected a mapping of facts to values, got {_kind(defaults)}")
        for fact in defaults:
            if fact not in FIX_FACTS:
                raise c.fail(f"{where}.defaults.{fact}", f"unknown fact (known: {', '.join(FIX_FACTS)})")
    return tuple(sorted((k, _freeze(v)) for k, v in item.items() if k not in ("id", "kind", "safety", "title")))


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def load_file(path: Path, display: str, *, origin: str = "builtin") -> Entry:
    """Read, parse and validate one entry file; the file name must agree with the id."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise KBError(display, "", f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KBError(display, "", f"not valid UTF-8 (byte {exc.start})") from None
    try:
        data = _yaml_load(text)
    except Exception as exc:  # yaml.YAMLError and its subclasses
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise KBError(display, where, f"invalid YAML: {problem}") from None
    entry = parse_entry(data, display, origin=origin)
    stem_id, _, slug = path.stem.partition("-")
    if stem_id != entry.id:
        raise KBError(display, "id", f"{entry.id!r} does not match the file name (expected it to start with '{entry.id}-')")
    if not slug or not SLUG_RE.match(slug):
        raise KBError(display, "", f"file name should be '{entry.id}-<slug>.yaml' with a lower-case slug naming the failure")
    return entry
