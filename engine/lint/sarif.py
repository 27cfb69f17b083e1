"""Render a LintResult as SARIF 2.1.0 (the format code-scanning services read)."""
from __future__ import annotations

import os
from urllib.parse import quote

from gpudoctor.engine.lint.checks import ALL
from gpudoctor.engine.lint.model import LintResult, source_line

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


def _uri(path: str) -> str:
    return quote(path.replace(os.sep, "/"))


def _char_col(path: str, line: int, col: int, cache: dict) -> int:
    """ast columns count UTF-8 bytes; SARIF counts characters (1-based)."""
    text = source_line(path, line, cache)
    if text is not None:
        return len(text.encode("utf-8")[:col].decode("utf-8", errors="ignore")) + 1
    return col + 1


def to_sarif(result: LintResult, version: str = "0") -> dict:
    rules = [{
        "id": c.code,
        "name": c.slug,
        "shortDescription": {"text": c.summary},
        "defaultConfiguration": {"level": c.severity},
        "help": {"text": f"gpudoctor show {c.code}"},
        "properties": {"tags": ["distributed-training", "pytorch"]},
    } for c in ALL]
    index = {c.code: i for i, c in enumerate(ALL)}
    cache: dict = {}
    results = []
    for f in result.findings:
        item = {
            "ruleId": f.entry_id,
            "level": f.severity,
            "message": {"text": f.message},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": _uri(f.path)},
                "region": {"startLine": max(1, f.line), "startColumn": _char_col(f.path, f.line, f.col, cache)},
            }}],
        }
        if f.entry_id in index:
            item["ruleIndex"] = index[f.entry_id]
        if f.fix_id:
            item["properties"] = {"fixId": f.fix_id}
        results.append(item)
    notes = [{"level": "error", "message": {"text": f"{path}: {msg}"},
              "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(path)}}}]}
             for path, msg in result.errors]
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "gpudoctor", "version": version, "rules": rules}},
            "invocations": [{"executionSuccessful": not result.errors, "toolExecutionNotifications": notes}],
            "results": results,
        }],
    }
