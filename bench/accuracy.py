"""Accuracy of `gpudoctor diagnose` on the evaluation set in tests/data/logs/manifest.yaml.

Prints top-1 and top-3 accuracy over the positives and the false-alarm rate over the negatives.
Targets (issue 3): top-1 >= 90%, top-3 >= 98%, false alarms <= 10%. Exit 1 when a target is missed.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "data" / "logs"


def evaluate(use_hyperscan: bool = True) -> dict:
    import yaml

    from gpudoctor.engine.diagnose import diagnose
    from gpudoctor.engine.sources import resolve
    from gpudoctor.kb.catalog import load_catalog

    catalog = load_catalog(use_cache=False)
    cases = yaml.safe_load((LOGS / "manifest.yaml").read_text())
    rows = []
    for case in cases:
        path = LOGS / case["path"]
        result = diagnose(catalog, resolve([str(path)]), engine=None if use_hyperscan else "python")
        ids = [f.id for f in result.findings]
        rows.append({"path": case["path"], "expect": case.get("expect"), "got": ids[:3]})
    positives = [r for r in rows if r["expect"]]
    negatives = [r for r in rows if not r["expect"]]
    top1 = sum(1 for r in positives if r["got"][:1] == [r["expect"]])
    top3 = sum(1 for r in positives if r["expect"] in r["got"][:3])
    alarms = sum(1 for r in negatives if r["got"])
    return {
        "rows": rows,
        "positives": len(positives),
        "negatives": len(negatives),
        "top1": top1 / len(positives) if positives else 0.0,
        "top3": top3 / len(positives) if positives else 0.0,
        "false_alarms": alarms / len(negatives) if negatives else 0.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-hyperscan", action="store_true", help="evaluate the pure-Python matcher")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every case")
    args = parser.parse_args()
    res = evaluate(use_hyperscan=not args.no_hyperscan)
    for r in res["rows"]:
        ok = (r["got"][:1] == [r["expect"]]) if r["expect"] else not r["got"]
        if args.verbose or not ok:
            mark = "ok  " if ok else "MISS"
            print(f"{mark} {r['path']:<60} expect {r['expect'] or '-':<5} got {', '.join(r['got']) or '-'}")
    print(f"positives {res['positives']}, negatives {res['negatives']}")
    print(f"top-1 {res['top1']:.1%} (target >= 90%)   top-3 {res['top3']:.1%} (target >= 98%)   "
          f"false alarms {res['false_alarms']:.1%} (target <= 10%)")
    good = res["top1"] >= 0.9 and res["top3"] >= 0.98 and res["false_alarms"] <= 0.1
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
