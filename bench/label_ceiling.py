"""How much of a log's label the log itself holds: a reader given only the log and the catalogue, against the
thread's label, beside gpudoctor on the same logs.

tests/data/blind_labels.yaml holds the labels a reader wrote for a random sample of public development logs, each
copied under a number so that neither its folder nor its name told the label, with only the catalogue at hand: no
thread, no manifest, no gpudoctor. tests/data/sealed/blind_labels.yaml holds the same for a sample of the sealed set,
written by other readers; only its aggregate figures are printed. The manifests' labels come from the threads (a
maintainer's diagnosis, the reporter's confirmed fix), which the log often does not show: the reader's agreement with
them is about the best a tool reading the log alone can reach, and the gap between that and gpudoctor is what is left
to win from logs.

    python bench/label_ceiling.py          # reader and gpudoctor side by side, dev and sealed samples
    python bench/label_ceiling.py --json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # accuracy.py beside this script

ROOT = Path(__file__).resolve().parent.parent
SETS = {"dev": ROOT / "tests" / "data" / "logs", "sealed": ROOT / "tests" / "data" / "sealed"}
LABELS = {"dev": ROOT / "tests" / "data" / "blind_labels.yaml",
          "sealed": ROOT / "tests" / "data" / "sealed" / "blind_labels.yaml"}


def load(which: str) -> list[dict]:
    """The reader's rows joined to the set's manifest labels (every row must name a log of that set)."""
    import yaml

    from accuracy import load_cases

    labels = LABELS[which]
    if not labels.is_file():
        return []
    cases = {c["path"]: c for c in load_cases(SETS[which], "manifest*.yaml", one_per_thread=False)}
    rows = []
    for row in yaml.safe_load(labels.read_text(encoding="utf-8")):
        case = cases.get(row["path"])
        if case is None:
            raise SystemExit(f"{labels}: a row names a log that is in no {which} manifest")
        rows.append({**row, "case": case})
    return rows


def figures(rows: list[dict]) -> dict:
    """The reader's and gpudoctor's figures on the same rows (rates rounded to 0.1%; None where nothing to count)."""
    from accuracy import evaluate_cases

    tool = evaluate_cases([r["case"] for r in rows])["rows"]
    pos = [(r, t) for r, t in zip(rows, tool) if r["case"].get("expect")]
    neg = [(r, t) for r, t in zip(rows, tool) if not r["case"].get("expect")]

    def rate(hits, total):
        return round(hits / total, 3) if total else None

    sure = [(r, t) for r, t in pos if r["confidence"] == "sure"]
    return {
        "logs": len(rows), "positives": len(pos), "negatives": len(neg),
        "reader_top1": rate(sum(r["label"] == r["case"]["expect"] for r, _ in pos), len(pos)),
        "reader_top3": rate(sum(r["case"]["expect"] in [r["label"], *r.get("alternatives", [])] for r, _ in pos),
                            len(pos)),
        "reader_sure_share": rate(len(sure), len(pos)),
        "reader_sure_right": rate(sum(r["label"] == r["case"]["expect"] for r, _ in sure), len(sure)),
        "reader_negatives_none": rate(sum(r["label"] is None for r, _ in neg), len(neg)),
        "reader_negatives_not_sure": rate(sum(r["label"] is None or r["confidence"] != "sure" for r, _ in neg),
                                          len(neg)),
        "tool_top1_confident": rate(sum(t["matches"][:1] == [r["case"]["expect"]] for r, t in pos), len(pos)),
        "tool_first_named": rate(sum(t["ranked"][:1] == [r["case"]["expect"]] for r, t in pos), len(pos)),
        "tool_top3": rate(sum(r["case"]["expect"] in t["ranked"] for r, t in pos), len(pos)),
        "tool_negatives_clean": rate(sum(not t["matches"] for _, t in neg), len(neg)),
        "tool_confident_share": rate(sum(bool(t["matches"]) for _, t in pos), len(pos)),
        "tool_confident_precision": rate(sum(t["matches"][:1] == [r["case"]["expect"]] for r, t in pos),
                                         sum(bool(t["matches"]) for _, t in pos)),
        "tool_first_named_where_reader_guessed": rate(
            sum(t["ranked"][:1] == [r["case"]["expect"]] for r, t in pos if r["confidence"] != "sure"),
            sum(r["confidence"] != "sure" for r, _ in pos)),
        "reader_right_where_guessed": rate(
            sum(r["label"] == r["case"]["expect"] for r, _ in pos if r["confidence"] != "sure"),
            sum(r["confidence"] != "sure" for r, _ in pos)),
        "tool_top1_where_reader_sure_and_right": rate(
            sum(t["matches"][:1] == [r["case"]["expect"]] for r, t in sure if r["label"] == r["case"]["expect"]),
            sum(r["label"] == r["case"]["expect"] for r, _ in sure)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    found = {which: figures(rows) for which in LABELS if (rows := load(which))}
    if args.json:
        print(json.dumps(found, indent=2))
        return 0

    def pct(v):
        return "-" if v is None else f"{100 * v:.1f}%"

    for which, f in found.items():
        print(f"{which}: {f['logs']} public logs ({f['positives']} positives, {f['negatives']} negatives),\n"
              "labelled blind from the log and the catalogue alone")
        print(f"  {'':48}{'reader':>9}{'gpudoctor':>11}")
        print(f"  {'top-1 (gpudoctor: confident match)':48}{pct(f['reader_top1']):>9}"
              f"{pct(f['tool_top1_confident']):>11}")
        print(f"  {'top-1 (gpudoctor: first named)':48}{'':>9}{pct(f['tool_first_named']):>11}")
        print(f"  {'top-3':48}{pct(f['reader_top3']):>9}{pct(f['tool_top3']):>11}")
        print(f"  {'negatives: no cause named (gpudoctor: no match)':48}{pct(f['reader_negatives_none']):>9}"
              f"{pct(f['tool_negatives_clean']):>11}")
        print(f"  {'negatives: no cause named for sure':48}{pct(f['reader_negatives_not_sure']):>9}")
        rows = [("reader sure of the cause (share of positives)", f["reader_sure_share"], None),
                ("right where the reader was sure", f["reader_sure_right"], None),
                ("confident match where the reader was sure+right", None, f["tool_top1_where_reader_sure_and_right"]),
                ("right where the reader guessed (gpudoctor: 1st)", f["reader_right_where_guessed"],
                 f["tool_first_named_where_reader_guessed"]),
                ("confident match (share of positives)", None, f["tool_confident_share"]),
                ("confident match right", None, f["tool_confident_precision"])]
        for label, reader, tool in rows:
            shown = (pct(reader) if reader is not None else "", pct(tool) if tool is not None else "")
            print(f"  {label:48}{shown[0]:>9}{shown[1]:>11}".rstrip())
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
