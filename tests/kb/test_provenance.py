"""Signatures written from the emitters: every recorded message template, rendered with sample values, matches."""
from __future__ import annotations

import re

import pytest

from gpudoctor.kb.catalog import load_catalog
from gpudoctor.kb.loader import KBError, parse_entry

# C++ stream pieces: `" << expr << "` between two literal pieces, or at either end of the template
_CPP = re.compile(r'"\s*<<\s*(?P<cpp>[^"]+?)\s*<<\s*"|"\s*<<\s*(?P<cpp_end>[^"]+?)\s*$|^\s*(?P<cpp_start>[^"]+?)\s*<<\s*"')
_PLACEHOLDER = re.compile(
    r"(?P<elide>\{\.\.\.\})"
    r"|(?P<pct>%%)"
    r"|(?P<pyname>%\((?P<pykey>\w+)\)[-+ #0]*\d*(?:\.\d+)?[sdifrx])"
    r"|(?P<printf>%[-+ #0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|z|j|t|L)?[diouxXeEfgGcspUARSV])"
    r"|(?P<fmt>\{(?P<field>[^{}]*)\})"
)
_NUMERIC = re.compile(r"rank|size|num|count|port|timeout|_ms\b|\bms\b|sec|idx|index|\bid\b|dev|step|epoch|"
                      r"attempt|nproc|\bn\b|\bi\b|\bj\b|seq|code|errno|bytes|pid|restart|world|slots|limit|len", re.I)


def render(template: str, values: tuple[str, ...] = ()) -> str:
    """Fill a message template's placeholders: printf, str.format, %(name)s and C++ `<<` streams."""
    supplied = list(values)

    def sample(name: str, numeric: bool) -> str:
        if supplied:
            return supplied.pop(0)
        return "3" if numeric else "x"

    def cpp(match: re.Match) -> str:
        expr = match.group("cpp") or match.group("cpp_end") or match.group("cpp_start") or ""
        return sample(expr, bool(_NUMERIC.search(expr)))

    def one(match: re.Match) -> str:
        if match.group("elide"):
            return sample("...", False)
        if match.group("pct"):
            return "%"
        if match.group("pyname"):
            key = match.group("pykey")
            return sample(key, match.group("pyname")[-1] in "dif" or bool(_NUMERIC.search(key)))
        if match.group("printf"):
            return sample("", match.group("printf")[-1] not in "scUARSV")
        field = match.group("field").split("!")[0].split(":")[0]
        return sample(field, bool(_NUMERIC.search(field)) if field else False)

    text = _CPP.sub(cpp, template) if "<<" in template else template
    return _PLACEHOLDER.sub(one, text)


def _flags(sig) -> int:
    return re.IGNORECASE if sig.caseless else 0


def _matches(sig, text: str) -> bool:
    """The signature matches some line of the rendered text, and that line carries its prefilter literal."""
    pattern = re.compile(sig.pattern, _flags(sig))
    for line in text.splitlines() or [text]:
        if pattern.search(line):
            probe = line.lower() if sig.caseless else line
            if not sig.literals or any(lit in probe for lit in sig.literals):
                return True
    return False


CATALOG = load_catalog(use_cache=False)
SHOWN = [e for e in CATALOG if e.log_visibility == "shows"]
TEMPLATES = [(e.id, s.id, k, p) for e in SHOWN for s in e.signatures for k, p in enumerate(s.provenance)]


def test_renderer_fills_every_kind_of_placeholder():
    assert render("Duplicate GPU detected : rank %d and rank %d both on CUDA device %lx") == (
        "Duplicate GPU detected : rank 3 and rank 3 both on CUDA device 3")
    assert render("The node '{node}' has failed to join the rendezvous '{self._settings.run_id}'") == (
        "The node 'x' has failed to join the rendezvous 'x'")
    assert render("ran for {:.2f} ms, rank {rank!r} {...} done %(world_size)d%%") == (
        "ran for x ms, rank 3 x done 3%")
    assert render('Duplicate GPU detected : rank " << rank_ << " and rank " << i << " both on CUDA device') == (
        "Duplicate GPU detected : rank 3 and rank 3 both on CUDA device")
    assert render("NET/Socket : Using%s", ("[0]docker0:172.17.0.2<0>",)) == "NET/Socket : Using[0]docker0:172.17.0.2<0>"


def test_shown_entries_have_signatures_with_templates():
    assert TEMPLATES, "no signature records its provenance"
    assert len({eid for eid, *_ in TEMPLATES}) == len([e for e in SHOWN if any(not s.derived for s in e.signatures)])


@pytest.mark.parametrize(("entry_id", "sig_id", "k", "prov"), TEMPLATES,
                         ids=[f"{e}-{s}-{k}" for e, s, k, _ in TEMPLATES])
def test_signature_matches_its_rendered_template(entry_id, sig_id, k, prov):
    entry = CATALOG.get(entry_id)
    sig = next(s for s in entry.signatures if s.id == sig_id)
    text = render(prov.template, prov.values)
    assert _matches(sig, text), (
        f"{entry_id}.{sig_id} does not match its template from {prov.repo}/{prov.path} ({prov.versions}), "
        f"rendered as {text!r}")


@pytest.mark.parametrize("entry", SHOWN, ids=[e.id for e in SHOWN])
def test_every_template_of_an_entry_is_covered_by_a_signature_that_can_name_it(entry):
    """A template recorded anywhere in the entry is matched by the signature recording it, or by a
    non-context one; no template is left that nothing of the entry would catch."""
    for sig in entry.signatures:
        for prov in sig.provenance:
            text = render(prov.template, prov.values)
            covering = [s.id for s in entry.signatures if not s.derived and _matches(s, text)]
            assert covering, f"{entry.id}: template {prov.template!r} ({prov.repo}/{prov.path}) is covered by none"


@pytest.mark.parametrize("entry", SHOWN, ids=[e.id for e in SHOWN])
def test_every_pattern_signature_of_a_shown_entry_has_provenance(entry):
    missing = [s.id for s in entry.signatures if not s.derived and not s.provenance]
    assert not missing, f"{entry.id}: pattern signatures without provenance: {missing}"


def test_provenance_errors_name_the_field():
    base = {"id": "X1", "title": "t", "section": "user", "summary": "s", "symptoms": ["s"], "cause": "c",
            "fix_summary": "f", "fix": [{"text": "t"}], "log_visibility": "shows"}

    def problem(prov, **sig):
        data = dict(base, signatures=[{"id": "a-sig", "literal": "some message", "weight": 0.5,
                                       "provenance": prov, **sig}])
        with pytest.raises(KBError) as err:
            parse_entry(data, "X1-t.yaml")
        return str(err.value)

    assert "X1-t.yaml: signatures[0].provenance[0].template: missing required field" in problem(
        [{"repo": "pytorch/pytorch", "path": "a.py", "versions": "torch 2"}])
    assert "signatures[0].provenance[0].repo: expected a GitHub repository" in problem(
        [{"repo": "pytorch", "path": "a.py", "template": "x", "versions": "torch 2"}])
    assert "signatures[0].provenance: expected a list" in problem("pytorch/pytorch")
    assert "signatures[0].provenance[0].values" in problem(
        [{"repo": "a/b", "path": "a.py", "template": "x", "versions": "1", "values": "eth0"}])
    data = dict(base, signatures=[{"id": "a-sig", "literal": "some message", "weight": 0.5, "provenance": [
        {"repo": "NVIDIA/nccl", "path": "src/init.cc", "template": "some message %s", "versions": "2.18"}]}])
    sig = parse_entry(data, "X1-t.yaml").signatures[0]
    assert sig.provenance[0].repo == "NVIDIA/nccl" and sig.provenance[0].template == "some message %s"
    assert _matches(sig, render(sig.provenance[0].template))


def test_show_json_carries_each_signatures_provenance(tmp_path):
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, GPUDOCTOR_CACHE_DIR=str(tmp_path), NO_COLOR="1")
    out = subprocess.run([sys.executable, "-m", "gpudoctor", "show", "D8", "--json"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    entry = doc[0] if isinstance(doc, list) else doc
    sigs = {s["id"]: s for s in entry["signatures"]}
    prov = sigs["reduction-not-finished"]["provenance"]
    assert prov and prov[0]["repo"] == "pytorch/pytorch" and "reducer.cpp" in prov[0]["path"]
    assert "Expected to have finished reduction" in prov[0]["template"] and prov[0]["versions"]
