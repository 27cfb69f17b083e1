"""Accuracy of `diagnose` on the evaluation set as written, and re-wrapped as a terminal paste at 80 and 120 columns.

A terminal (or a web page's <pre>) shows a long line as several rows of exactly the window's width; copying
them gives one line per row. This re-wraps every log of tests/data/logs/manifest.yaml that way, into a temp
folder, and runs the same evaluation on it. Target (issue 9): each wrapped set loses at most 2 points of top-1.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "data" / "logs"
WIDTHS = (80, 120)


def hard_wrap(text: str, width: int) -> str:
    """Each line cut into rows of `width` characters, as a terminal shows it and a copy gives it back."""
    rows = []
    for line in text.split("\n"):
        line = line.rstrip("\r").expandtabs(8)
        if not line:
            rows.append("")
            continue
        rows.extend(line[k : k + width] for k in range(0, len(line), width))
    return "\n".join(rows)


def wrapped_copy(width: int, into: Path) -> Path:
    """tests/data/logs with every text file re-wrapped at `width` (gzip and binary files copied as they are)."""
    return copy_with(lambda text: hard_wrap(text, width), into)


def copy_with(transform, into: Path) -> Path:
    """tests/data/logs with every text file passed through transform(text) (manifests, gzip and binary files copied
    as they are)."""
    for path in LOGS.rglob("*"):
        target = into / path.relative_to(LOGS)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        data = path.read_bytes()
        if path.name.startswith("manifest") or b"\x00" in data[:4096] or data[:2] == b"\x1f\x8b":
            shutil.copyfile(path, target)
            continue
        target.write_bytes(transform(data.decode("utf-8", "replace")).encode("utf-8"))
    return into


def evaluate(root: Path, catalog) -> tuple[float, int, int, list[str]]:
    """(top-1 over positives: the first cause named; positives; confident matches on negatives; missed paths)."""
    import yaml

    from gpudoctor.engine.diagnose import diagnose
    from gpudoctor.engine.sources import resolve

    cases = yaml.safe_load((root / "manifest.yaml").read_text())
    hits, positives, alarms, missed = 0, 0, 0, []
    for case in cases:
        result = diagnose(catalog, resolve([str(root / case["path"])]))
        ids = [f.id for f in result.findings]  # what the report names first, a possible cause included
        if case.get("expect"):
            positives += 1
            if ids[:1] == [case["expect"]]:
                hits += 1
            else:
                missed.append(f"{case['path']} expect {case['expect']} got {ids[:1] or '-'}")
        elif any(f.tier == "match" for f in result.findings):  # a guess, kept apart as possible, is no alarm
            alarms += 1
    return hits / positives, positives, alarms, missed


def measure(catalog, variants: dict, verbose: bool = False, note: str = "") -> dict[str, tuple[float, int]]:
    """The accuracy set as written and through each variant's transform(text): name -> (top-1, false alarms), a
    line printed for each (with verbose, also the logs it loses)."""
    base, n, alarms, base_missed = evaluate(LOGS, catalog)
    figures = {"as written": (base, alarms)}
    print(f"{'as written':<24} top-1 {base:.1%} of {n}, false alarms {alarms}")
    for name, transform in variants.items():
        with tempfile.TemporaryDirectory(prefix="gpudoctor-variant-") as tmp:
            top1, _n, alarms, missed = evaluate(copy_with(transform, Path(tmp)), catalog)
        figures[name] = (top1, alarms)
        print(f"{name:<24} top-1 {top1:.1%}, false alarms {alarms}, loss {100 * (base - top1):.1f} points{note}")
        if verbose:
            for line in sorted(set(missed) - set(base_missed)):
                print("  LOST", line)
    return figures


def run(verbose: bool = False) -> dict[str, float]:
    from gpudoctor.kb.catalog import load_catalog

    variants = {f"{width} columns": (lambda text, width=width: hard_wrap(text, width)) for width in WIDTHS}
    figures = measure(load_catalog(use_cache=False), variants, verbose, " (target <= 2)")
    return {name: top1 for name, (top1, _alarms) in figures.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-v", "--verbose", action="store_true", help="list the logs each wrapped set loses")
    args = ap.parse_args()
    figures = run(args.verbose)
    base = figures["as written"]
    return 0 if all(base - v <= 0.02 for v in figures.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
