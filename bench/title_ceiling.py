"""What a title alone can tell: blind readers against `gpudoctor search` on the same held-out issue titles.

Two readers named an entry for each of the 129 titles of the held-out splits held3 and held7, from the title and the
catalogue alone (tests/kb/title_readers.yaml says how). This prints, on those titles, each reader's top-1 and top-3,
how often a reader was sure and right when sure, search's top-1 and top-3, and search on the titles both readers were
sure of and right about: the part of the gap search could close with the words a title has. Issue 8's search target
(95% first) is judged against the readers' figure, which is what a careful person gets from the same words.
Measured 2026-11-28: readers 78.3% and 80.6% first, search 62.0% (76.7% in its top three).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READERS = ROOT / "tests" / "kb" / "title_readers.yaml"
SPLITS = ("held3", "held7")


def evaluate() -> dict:
    import yaml

    from gpudoctor.kb.catalog import load_catalog

    expect = {}
    for split in SPLITS:
        for title, entry, _url, _split in yaml.safe_load(
                (ROOT / "tests" / "kb" / f"search_titles_{split}.yaml").read_text(encoding="utf-8")):
            expect[title] = entry
    rows = yaml.safe_load(READERS.read_text(encoding="utf-8"))
    index = load_catalog(use_cache=False).search_index()
    n = len(rows)
    figures: dict = {"titles": n}
    for i, name in enumerate(("reader_a", "reader_b"), start=1):
        top1 = sum(row[i][0] == expect[row[0]] for row in rows)
        top3 = sum(expect[row[0]] in [row[i][0], *row[i][2]] for row in rows)
        sure = [row for row in rows if row[i][1] == "sure"]
        figures[name] = {"top1": top1 / n, "top3": top3 / n, "sure": len(sure) / n,
                         "right_when_sure": sum(row[i][0] == expect[row[0]] for row in sure) / max(1, len(sure))}
    got = {row[0]: [h.id for h in index.search(row[0], limit=3)] for row in rows}
    figures["search"] = {"top1": sum(got[t][:1] == [e] for t, e in ((r[0], expect[r[0]]) for r in rows)) / n,
                         "top3": sum(expect[r[0]] in got[r[0]] for r in rows) / n}
    clear = [r[0] for r in rows if r[1][1] == r[2][1] == "sure" and r[1][0] == r[2][0] == expect[r[0]]]
    figures["both_sure_and_right"] = {"titles": len(clear),
                                      "search_top1": sum(got[t][:1] == [expect[t]] for t in clear) / max(1, len(clear))}
    figures["readers_agree"] = sum(r[1][0] == r[2][0] for r in rows) / n
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    f = evaluate()
    if args.json:
        print(json.dumps(f, indent=2))
        return 0
    print(f"{f['titles']} held-out titles ({', '.join(SPLITS)})          top-1   top-3   sure   right when sure")
    for name in ("reader_a", "reader_b"):
        r = f[name]
        print(f"  {name.replace('_', ' '):<36} {r['top1']:6.1%}  {r['top3']:6.1%}  {r['sure']:5.0%}   {r['right_when_sure']:6.1%}")
    print(f"  {'gpudoctor search':<36} {f['search']['top1']:6.1%}  {f['search']['top3']:6.1%}")
    c = f["both_sure_and_right"]
    print(f"both readers sure and right: {c['titles']} titles; search first on {c['search_top1']:.1%} of them")
    print(f"readers agree on {f['readers_agree']:.1%} of titles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
