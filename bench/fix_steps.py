"""Does `diagnose` lead with the fix step that worked? The entries' `fix_for`, measured against threads' own fixes.

Labels: tests/data/fix_steps.yaml (development) and tests/data/sealed/fix_steps.yaml (sealed), written by
helpers who read each thread's note and the entry's numbered fix steps, never the tool's answer or `fix_for`:
`steps` lists the step(s) whose advice is the fix the thread applied or was told to apply ([] where the note does not
say, or no step fits). A log counts when its label names a step and diagnose's first confident match is the labelled
entry.

Figures per set:
  pointed     logs whose finding carries a step (fix_for fired), and how many of those steps are a labelled one;
  first step  what the report leads with against the label: the pointed step, else the entry's step 1 (read first
              in `gpudoctor show`), beside the same count for "always step 1" (the report before fix_for).
Sealed figures are totals only; -v lists the development set's disagreements.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETS = {"dev": ROOT / "tests" / "data" / "logs", "sealed": ROOT / "tests" / "data" / "sealed"}
# beside the set's logs only where every file there need not be a listed log (as bench/label_ceiling.py does)
LABELS = {"dev": ROOT / "tests" / "data" / "fix_steps.yaml", "sealed": SETS["sealed"] / "fix_steps.yaml"}


def load_labels(name: str) -> list[dict]:
    """The labels of one set ("dev" or "sealed") that name a step."""
    import yaml

    path = LABELS[name]
    if not path.is_file():
        return []
    return [dict(item) for item in yaml.safe_load(path.read_text()) or [] if item.get("steps")]


def evaluate(name: str, catalog=None) -> dict:
    """Counts for one set, and the rows behind them (path, entry, labelled steps, pointed step, first step)."""
    from gpudoctor.engine.diagnose import diagnose
    from gpudoctor.engine.sources import resolve

    if catalog is None:
        from gpudoctor.kb.catalog import load_catalog

        catalog = load_catalog(use_cache=False)
    rows = []
    for label in load_labels(name):
        result = diagnose(catalog, resolve([str(SETS[name] / label["path"])]))
        matches = [f for f in result.findings if f.tier == "match"]
        if not matches or matches[0].id != label["entry"]:
            continue
        pointed = matches[0].pointed.step if matches[0].pointed is not None else 0
        rows.append({"path": label["path"], "entry": label["entry"], "steps": list(label["steps"]),
                     "pointed": pointed, "first": pointed or 1})
    with_pointer = [r for r in rows if r["pointed"]]
    return {
        "logs": len(rows),
        "pointed": len(with_pointer),
        "pointed_right": sum(r["pointed"] in r["steps"] for r in with_pointer),
        "pointed_rows_step1_right": sum(1 in r["steps"] for r in with_pointer),
        "first_right": sum(r["first"] in r["steps"] for r in rows),
        "step1_right": sum(1 in r["steps"] for r in rows),
        "rows": rows,
    }


def _pct(hits: int, total: int) -> str:
    return f"{hits}/{total} ({hits / total:.0%})" if total else "-"


def render(figures: dict[str, dict], verbose: bool) -> str:
    lines = [f"{'':44}" + "".join(f"{name:>20}" for name in figures)]
    table = [
        ("labelled logs, entry matched first", lambda f: str(f["logs"])),
        ("with a pointed step", lambda f: _pct(f["pointed"], f["logs"])),
        ("  pointed step is the thread's fix", lambda f: _pct(f["pointed_right"], f["pointed"])),
        ("  step 1 would have been (same logs)", lambda f: _pct(f["pointed_rows_step1_right"], f["pointed"])),
        ("first step shown is the thread's fix", lambda f: _pct(f["first_right"], f["logs"])),
        ("  always step 1 (before fix_for)", lambda f: _pct(f["step1_right"], f["logs"])),
    ]
    for name, get in table:
        lines.append(f"{name:44}" + "".join(f"{get(f):>20}" for f in figures.values()))
    if verbose and "dev" in figures:
        for r in figures["dev"]["rows"]:
            if r["pointed"] and r["pointed"] not in r["steps"]:
                lines.append(f"DISAGREE [dev] {r['path']:70} {r['entry']:4} pointed {r['pointed']} label {r['steps']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="\n".join(__doc__.splitlines()[2:]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="list the development set's disagreements")
    parser.add_argument("--json", action="store_true", help="figures as JSON (no per-log rows)")
    parser.add_argument("--dev-only", action="store_true", help="measure the development set alone")
    args = parser.parse_args(argv)
    names = ["dev"] if args.dev_only else list(SETS)
    figures = {name: evaluate(name) for name in names}
    if args.json:
        print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "rows"} for k, v in figures.items()}, indent=2))
    else:
        print(render(figures, args.verbose))
    return 0


if __name__ == "__main__":
    sys.exit(main())
