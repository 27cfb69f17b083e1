"""Loader validation: every error names its file and field; user runbooks add, override, never hide."""
from __future__ import annotations

import textwrap

import pytest

from gpudoctor.kb.catalog import build_catalog, load_catalog, BUILTIN_DIR

GOOD = textwrap.dedent("""\
    id: X1
    title: Our NFS mount stalls the data loader
    section: user
    summary: The shared NFS mount goes away and every rank blocks in read().
    symptoms:
      - all ranks stuck in a read of /mnt/data
    cause: The NFS server is overloaded.
    fix_summary: Copy the data set to local NVMe first.
    fix:
      - text: Stage the data set on local disk.
        code: rsync -a /mnt/data/ /local/data/
        lang: bash
    log_visibility: shows
    error_strings: ["nfs: server not responding"]
    signatures:
      - id: nfs-not-responding
        literal: "nfs: server not responding"
        weight: 0.9
    related:
      - id: D8
        why: a stuck rank can also be a skipped reduction
    """)


def write(folder, name, text):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def problems_for(tmp_path, name, text):
    path = write(tmp_path / "runbooks", name, text)
    catalog = build_catalog([(BUILTIN_DIR, True), (tmp_path / "runbooks", False)])
    return [p for p in catalog.problems if p.startswith(str(path))], catalog


def test_good_user_entry_loads_beside_builtins(tmp_path):
    found, catalog = problems_for(tmp_path, "X1-nfs-stall.yaml", GOOD)
    assert found == []
    assert catalog.get("x1").origin == "user"
    assert catalog.get("D8") is not None
    assert catalog.get("X1").signatures[0].literal == "nfs: server not responding"


@pytest.mark.parametrize(
    "change, where",
    [
        (("  - id: D8\n", "  - id: D8\n    why: x\n  - id: D99\n    why: nope\n  - id: D8\n"), "related[1]: unknown id 'D99'"),
        (("literal: \"nfs: server not responding\"", "regex: 'nfs: (server'"), "signatures[0].regex: invalid regular expression"),
        (("literal: \"nfs: server not responding\"", "regex: 'nfs: (\\w+ ?)+responding'"),
         "signatures[0].regex: a repeat inside a repeat"),
        (("weight: 0.9", "weight: 3"), "signatures[0].weight: expected a number in (0, 1]"),
        (("section: user", "section: gpus"), "section: unknown section 'gpus'"),
        (("log_visibility: shows", "log_visibility: maybe"), "log_visibility: expected 'shows' or 'never'"),
        (("title: Our NFS mount stalls the data loader\n", ""), "title: missing required field"),
        (("symptoms:\n  - all ranks stuck in a read of /mnt/data", "symptoms: 5"), "symptoms: expected a list, got int"),
        (("    lang: bash\n", "    lang: bash\n    run: yes\n"), "fix[0].run: unknown field"),
        (("cause:", "causes:"), "causes: unknown field"),
    ],
)
def test_errors_name_file_and_field(tmp_path, change, where):
    old, new = change
    assert old in GOOD
    found, catalog = problems_for(tmp_path, "X1-nfs-stall.yaml", GOOD.replace(old, new))
    # a renamed field is both unknown and, under its own name, missing: one pass says both
    assert len(found) == (2 if where.startswith("causes") else 1), catalog.problems
    assert where in found[0]
    assert found[0].startswith(str(tmp_path / "runbooks" / "X1-nfs-stall.yaml") + ": ")
    # the broken runbook never hides the built-in catalogue
    assert catalog.get("D8") is not None


def test_every_problem_of_a_file_is_named_in_one_pass(tmp_path):
    broken = (GOOD.replace("cause:", "causes:").replace("log_visibility: shows", "log_visibility: maybe")
              .replace('literal: "nfs: server not responding"', "regex: '(unclosed'").replace("weight: 0.9", "weight: 5"))
    found, catalog = problems_for(tmp_path, "X1-nfs-stall.yaml", broken)
    fields = [line.split(": ", 2)[1] for line in found]
    assert fields == ["causes", "cause", "log_visibility", "signatures[0].weight", "signatures[0].regex"], found
    assert catalog.get("X1") is None and catalog.get("D8") is not None


def test_yaml_syntax_error_names_line(tmp_path):
    found, _ = problems_for(tmp_path, "X1-nfs-stall.yaml", GOOD.replace("symptoms:\n", "symptoms: [\n"))
    assert len(found) == 1 and "invalid YAML" in found[0] and ": line " in found[0]


def test_file_name_must_match_id(tmp_path):
    found, _ = problems_for(tmp_path, "X2-nfs-stall.yaml", GOOD)
    assert len(found) == 1 and "id: 'X1' does not match the file name" in found[0]


def test_invalid_utf8_and_binary_files_are_reported(tmp_path):
    found, _ = problems_for(tmp_path, "X1-nfs-stall.yaml", "")
    assert found and "expected a mapping" in found[0]
    path = tmp_path / "runbooks" / "X1-nfs-stall.yaml"
    path.write_bytes(b"id: X1\ntitle: \xff\xfe\x00\x01\n")
    catalog = build_catalog([(tmp_path / "runbooks", False)])
    assert any("not valid UTF-8" in p for p in catalog.problems)


def test_user_entry_overrides_builtin(tmp_path, monkeypatch):
    override = GOOD.replace("id: X1", "id: D8").replace("section: user", "section: ddp")
    write(tmp_path / "kb", "D8-our-own-take.yaml", override)
    monkeypatch.setenv("GPUDOCTOR_KB", str(tmp_path / "kb"))
    catalog = load_catalog()
    assert catalog.get("D8").origin == "user"
    assert catalog.get("D8").title.startswith("Our NFS mount")


def test_missing_runbook_folder_is_reported(tmp_path):
    catalog = load_catalog([str(tmp_path / "nope")])
    assert any("runbook folder not found" in p for p in catalog.problems)
    assert catalog.get("D8") is not None


def test_cache_is_invalidated_when_a_file_changes(tmp_path):
    folder = tmp_path / "kb"
    path = write(folder, "X1-nfs-stall.yaml", GOOD)
    first = load_catalog([str(folder)])
    assert first.get("X1").title.startswith("Our NFS")
    path.write_text(GOOD.replace("Our NFS mount stalls", "The NFS mount stalls"))
    second = load_catalog([str(folder)])
    assert second.get("X1").title.startswith("The NFS mount stalls")


def test_corrupt_cache_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "c"))
    load_catalog()
    from gpudoctor.kb.catalog import _cache_path

    _cache_path().write_bytes(b"\x80\x05garbage")
    assert load_catalog().get("D8") is not None


def test_two_installed_copies_keep_their_own_cache_files(tmp_path, monkeypatch):
    """A venv per project, or a checkout beside a wheel: each copy's catalogue is cached under its own name, so
    running one does not throw away the other's cache (it did, and every switch cost a rebuild)."""
    from gpudoctor.kb import catalog as catalog_module

    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "c"))
    here = catalog_module._cache_path()
    load_catalog()
    assert here.exists() and here.parent == tmp_path / "c"
    stamp = here.stat().st_mtime_ns
    monkeypatch.setattr(catalog_module, "BUILTIN_DIR", tmp_path / "other-install" / "kb")
    there = catalog_module._cache_path()
    assert there != here and there.name.startswith("catalog-") and there.suffix == ".pickle"
    monkeypatch.undo()
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "c"))
    assert catalog_module._cache_path() == here
    load_catalog()
    assert here.stat().st_mtime_ns == stamp  # read, not rewritten


@pytest.mark.parametrize("regex, risky", [
    (r"XYZ(a+)+$", True),                       # the textbook case
    (r"nfs: (\w+\s?)*timeout", True),           # words with an optional space: many ways to split a run
    (r"step (.*)+ done", True),
    (r"(?:x.*)+y", True),                       # the turn starts with x, but .* inside takes x too
    (r"(?:[\w-]+-)+z", True),                    # the separator is one the inner class also takes
    (r"Ranks? \d+(?:, \d+)* failed", False),     # a list fenced by ", "
    (r"sizes \S+(?: \S+)*? appears", False),     # fenced by a space \S cannot take
    (r"(?:\d+, )*end", False),                   # fenced at the end of each turn
    (r"(?:(?:Process \d+|Including) has [\d.]+ MiB\. ?)*x", False),  # every branch starts with a letter
    (r"(?:a|b)+c", False),                      # one loop only
])
def test_nested_repeats_are_told_from_fenced_lists(regex, risky):
    from gpudoctor.kb.backtracking import nested_repeat

    assert nested_repeat(regex) is risky


def test_a_runbook_regex_that_backtracks_is_refused_and_diagnose_stays_fast(tmp_path):
    import subprocess
    import sys
    import time

    runbooks = tmp_path / "runbooks"
    write(runbooks, "X6-redos.yaml", GOOD.replace("id: X1", "id: X6").replace(
        "literal: \"nfs: server not responding\"", "regex: 'XYZ(a+)+$'"))
    log = tmp_path / "run.log"
    log.write_text("XYZ" + "a" * 40 + "b\nRuntimeError: Address already in use\n")
    cli = [sys.executable, "-m", "gpudoctor"]
    checked = subprocess.run(cli + ["validate", str(runbooks)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 1
    assert "X6-redos.yaml: signatures[0].regex: a repeat inside a repeat" in checked.stdout + checked.stderr
    began = time.monotonic()
    # 40 letters would take Python's matcher hours: the signature is left out, with a warning, and the rest runs
    ran = subprocess.run(cli + ["diagnose", "--kb", str(runbooks), "--engine", "python", str(log)],
                         capture_output=True, text=True, timeout=60)
    assert time.monotonic() - began < 30
    assert ran.returncode == 0 and "D4" in ran.stdout
    assert "a repeat inside a repeat" in ran.stderr
