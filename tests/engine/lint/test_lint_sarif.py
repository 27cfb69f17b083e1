"""`gpudoctor lint --format sarif` validates against the official SARIF 2.1.0 JSON schema."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema

DATA = Path(__file__).resolve().parents[2] / "data"
SCHEMA = DATA / "sarif" / "sarif-schema-2.1.0.json"


def _validator():
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _sarif(*paths):
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "lint", "--format", "sarif", *map(str, paths)],
                          capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"}, timeout=120)
    return proc, json.loads(proc.stdout)


def test_schema_is_the_recorded_document():
    readme = (DATA / "sarif" / "README.md").read_text()
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() in readme
    assert json.loads(SCHEMA.read_text())["id"].startswith("https://docs.oasis-open.org/sarif/sarif/v2.1.0/")


def test_findings_validate_and_carry_rule_level_and_location():
    proc, log = _sarif(DATA / "lint" / "buggy")
    assert proc.returncode == 1
    _validator().validate(log)
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert run["results"], "the buggy scripts give results"
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] in ("error", "warning", "note")
        region = result["locations"][0]["physicalLocation"]["region"]
        assert region["startLine"] >= 1 and region["startColumn"] >= 1
    assert any(r["ruleId"] == "D21" and r["level"] == "error" for r in run["results"])


def test_unparsable_file_is_a_notification_and_still_valid(tmp_path):
    (tmp_path / "broken.py").write_text("if True\n")
    shutil.copy(DATA / "lint" / "buggy" / "d3_set_device_global_rank.py", tmp_path / "name with space.py")
    proc, log = _sarif(tmp_path)
    assert proc.returncode == 2
    _validator().validate(log)
    invocation = log["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert "broken.py" in invocation["toolExecutionNotifications"][0]["message"]["text"]
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in log["runs"][0]["results"]}
    assert any(u.endswith("name%20with%20space.py") for u in uris)


def test_an_invalid_log_is_rejected():
    _, log = _sarif(DATA / "lint" / "buggy" / "d22_sampler_without_set_epoch.py")
    log["runs"][0]["results"][0]["level"] = "fatal"
    try:
        _validator().validate(log)
    except jsonschema.ValidationError:
        return
    raise AssertionError("the schema accepted an unknown level")
