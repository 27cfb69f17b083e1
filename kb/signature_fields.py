"""The signatures of a catalogue entry: each one's pattern, weight and flags checked, and the provenance of the
message it was written from. `c` is the loader's checker (kb/loader.py): it names the file and field of a problem,
and notes a problem that leaves the rest readable so that one pass finds them all."""
from __future__ import annotations

import re
from typing import Any

from gpudoctor.kb.model import DERIVED_SIGNALS, Provenance, Signature

SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


def parse_signatures(c, raw: Any) -> tuple[Signature, ...]:
    out: list[Signature] = []
    seen: set[str] = set()
    for i, item in enumerate(c.items(raw, "signatures")):
        before = len(c.problems)
        sig = c.soft(lambda i=i, item=item: _parse_signature(c, i, item, seen), None)
        if sig is not None and len(c.problems) == before:
            out.append(sig)
    for i, sig in enumerate(out):
        for field_name in ("needs", "after"):
            for j, need in enumerate(getattr(sig, field_name)):
                if need not in seen or need == sig.id:
                    c.note(f"signatures[{i}].{field_name}[{j}]", f"unknown signature id {need!r} in this entry")
    return tuple(out)


_SIGNATURE_FIELDS = {"id", "regex", "literal", "derived", "weight", "needs", "after", "min_files", "context",
                     "ignore_case", "provenance"}


def _parse_signature(c, i: int, item: Any, seen: set[str]) -> Signature | None:
    """One signature; a problem that leaves the rest readable is noted and the others are still looked for."""
    where = f"signatures[{i}]"
    item = c.mapping(item, where, _SIGNATURE_FIELDS, ("id", "weight"))
    sig_id = c.text(item["id"], f"{where}.id")
    if not SLUG_RE.match(sig_id):
        c.note(f"{where}.id", f"{sig_id!r} should be lower-case words joined by '-'")
    if sig_id in seen:
        c.note(f"{where}.id", f"duplicate signature id {sig_id!r}")
    seen.add(sig_id)
    kinds = [k for k in ("regex", "literal", "derived") if item.get(k) is not None]
    ignore_case = item.get("ignore_case", False)
    if not isinstance(ignore_case, bool):
        c.note(f"{where}.ignore_case", "expected true or false")
        ignore_case = False
    weight = item["weight"]
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight <= 1:
        c.note(f"{where}.weight", f"expected a number in (0, 1], got {weight!r}")
    min_files = item.get("min_files", 1)
    if isinstance(min_files, bool) or not isinstance(min_files, int) or min_files < 1:
        c.note(f"{where}.min_files", f"expected a whole number >= 1, got {min_files!r}")
    context = item.get("context", False)
    if not isinstance(context, bool):
        c.note(f"{where}.context", "expected true or false")
    if len(kinds) != 1:
        raise c.fail(where, "give exactly one of 'regex', 'literal' or 'derived'")
    literal = derived = None
    caseless, literals = ignore_case, frozenset()
    if kinds[0] == "derived":
        derived = c.text(item["derived"], f"{where}.derived")
        if derived not in DERIVED_SIGNALS:
            raise c.fail(f"{where}.derived", f"unknown signal {derived!r} (known: {', '.join(DERIVED_SIGNALS)})")
        pattern = ""
    else:
        literal = c.text(item["literal"], f"{where}.literal") if kinds[0] == "literal" else None
        pattern = re.escape(literal) if literal is not None else c.text(item["regex"], f"{where}.regex")
        try:
            compiled = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            raise c.fail(f"{where}.regex", f"invalid regular expression: {exc}") from None
        from gpudoctor.kb.backtracking import nested_repeat
        from gpudoctor.kb.literals import MIN_LITERAL, required_literals

        if nested_repeat(pattern):
            raise c.fail(f"{where}.regex", "a repeat inside a repeat, such as (a+)+ or (\\w+\\s?)*, can take the "
                         "matcher exponential time on a line that almost matches; keep one loop, or begin or end each "
                         "turn of the outer one with a character the inner one cannot match, as in \\d+(?:, \\d+)*")

        caseless = bool(compiled.flags & re.IGNORECASE)
        literals = required_literals(pattern, caseless)
        if not literals:
            raise c.fail(f"{where}.regex", f"needs a literal run of {MIN_LITERAL}+ characters that every "
                         "match contains (the fast prefilter looks for it)")
    provenance = _parse_provenance(c, item.get("provenance"), f"{where}.provenance")
    if provenance and derived:
        raise c.fail(f"{where}.provenance", "a derived signal has no message template; give provenance only "
                     "to a regex or literal")
    return Signature(
        id=sig_id,
        pattern=pattern,
        weight=float(weight) if isinstance(weight, (int, float)) else 0.0,
        literal=literal,
        derived=derived,
        caseless=caseless,
        literals=tuple(sorted(literals or ())),
        needs=c.texts(item.get("needs"), f"{where}.needs"),
        after=c.texts(item.get("after"), f"{where}.after"),
        min_files=min_files,
        context=context,
        ignore_case=ignore_case,
        provenance=provenance,
    )


REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


def _parse_provenance(c, raw: Any, where: str) -> tuple[Provenance, ...]:
    """Each item names the emitting repository, the file, the message template and the versions."""
    out = []
    for i, item in enumerate(c.items(raw, where)):
        at = f"{where}[{i}]"
        item = c.mapping(item, at, {"repo", "path", "template", "versions", "values"}, ("repo", "path", "template", "versions"))
        repo = c.text(item["repo"], f"{at}.repo")
        if not REPO_RE.match(repo):
            raise c.fail(f"{at}.repo", f"expected a GitHub repository as owner/name, got {repo!r}")
        path = c.text(item["path"], f"{at}.path")
        if path.startswith("/") or ".." in path.split("/"):
            raise c.fail(f"{at}.path", f"expected a path inside the repository, got {path!r}")
        template = item["template"]
        if not isinstance(template, str) or not template.strip():
            raise c.fail(f"{at}.template", "expected the message template as text")
        values = item.get("values")
        if values is not None and (not isinstance(values, list) or not all(isinstance(v, (str, int)) for v in values)):
            raise c.fail(f"{at}.values", "expected a list of sample values, one per placeholder in order")
        out.append(Provenance(repo=repo, path=path, template=template.strip("\n"),
                              versions=c.text(item["versions"], f"{at}.versions"),
                              values=tuple(str(v) for v in values or ())))
    return tuple(out)
