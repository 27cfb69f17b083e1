"""Every lint check against its own YAML of hit and miss cases (tests/engine/lint/cases/<ID>.yaml)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpudoctor.engine.lint import lint_paths, lint_source
from gpudoctor.engine.lint.checks import ALL, BY_CODE

CASES = Path(__file__).parent / "cases"


def _load():
    for path in sorted(CASES.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        for case in doc["cases"]:
            yield pytest.param(doc["id"], case, id=f"{doc['id']}-{case['name']}")


@pytest.mark.parametrize("entry_id,case", list(_load()))
def test_case(entry_id, case, tmp_path):
    if "script" in case or case.get("path", "").endswith((".sh", ".sbatch", ".slurm")):
        launch = tmp_path / case["path"]
        launch.write_text(case["code"])
        if "script" in case:
            (tmp_path / "train.py").write_text(case["script"])
        result = lint_paths([str(launch)], select=[entry_id])
    else:
        result = lint_source(case["code"], "case.py", select=[entry_id])
    assert not result.errors
    got = sorted(f.line for f in result.findings if f.entry_id == entry_id)
    assert got == sorted(case["expect"]), [f.message for f in result.findings]


def test_every_check_has_hits_and_misses():
    for check in ALL:
        doc = yaml.safe_load((CASES / f"{check.code}.yaml").read_text())
        names = [c["name"] for c in doc["cases"]]
        assert any(n.startswith("hit_") for n in names), check.code
        assert any(n.startswith("miss_") for n in names), check.code
        assert doc["id"] == check.code


def test_codes_and_slugs_are_catalogue_entries_and_unique():
    from gpudoctor.kb.catalog import load_catalog

    catalog = load_catalog()
    assert len({c.slug for c in ALL}) == len(ALL) == len(BY_CODE)
    for check in ALL:
        assert check.code in catalog.entries, check.code
        assert check.severity in ("error", "warning", "note")
        assert check.slug.replace("-", "").isalnum() and check.slug.islower()


def test_check_modules_one_per_file_named_by_code_and_slug():
    folder = Path(__import__("gpudoctor.engine.lint.checks", fromlist=["x"]).__file__).parent
    names = {p.stem for p in folder.glob("*.py")} - {"__init__"}
    modules = {type(c).__module__.rsplit(".", 1)[-1]: c for c in ALL}
    assert names == set(modules)  # every module is registered, one check each
    for module, check in modules.items():
        assert module.startswith(check.code.lower() + "_"), module
