"""What a second witness does to the diagnosis: each public log of the development set, read alone and then beside
a training script (or launch command) that has one catalogue bug.

Beside a script whose bug is the log's own cause, the right entry should become the confident first answer
("confirmed"); beside a script whose bug is some other entry's, the answer must not change to that entry
("taken over"), because a real script often has a harmless bug that has nothing to do with the failure.

Scripts: tests/data/lint/buggy/ (the lint bench's own scripts, one per entry) and one launch command per command
check. Logs: tests/data/logs (the sealed set is not read). Figures from one run; nothing is tuned here.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

BUGGY = ROOT / "tests" / "data" / "lint" / "buggy"
SCRIPTS = {  # entry -> a script whose one bug (error or warning) is that entry's
    "D3": "d3_set_device_global_rank.py", "D21": "d21_barrier_in_rank0_validation.py",
    "D22": "d22_sampler_without_set_epoch.py", "D23": "d23_save_on_every_rank.py",
    "D26": "d26_vocab_extended_on_main_process.py", "D27": "d27_torchrun_under_srun_per_gpu_tasks.sbatch",
    "D2": "d2_multinode_torchrun_without_srun.sbatch", "MN5": "mn5_launch.sh", "P1": "p1_dataparallel.py",
    "P2": "p2_ddp_before_to_device.py", "P3": "p3_ddp_without_sampler.py",
    "P6": "p6_accumulation_without_no_sync.py",
}
COMMANDS = {  # entry -> a launch command whose one bug is that entry's
    "D5": "accelerate launch --num_processes 1 train.py",
    "D6": "deepspeed --num_nodes 2 --num_gpus 8 train.py",
}


def witnesses() -> dict[str, list]:
    from gpudoctor.engine.corroborate import from_command, from_lint
    from gpudoctor.engine.lint.runner import lint_paths

    out = {}
    for entry, name in SCRIPTS.items():
        found = [w for w in from_lint(lint_paths([str(BUGGY / name)], jobs=1).findings)]
        assert {w.entry for w in found} == {entry}, (name, {w.entry for w in found})
        out[entry] = found
    for entry, cmd in COMMANDS.items():
        out[entry] = from_command(cmd)
        assert {w.entry for w in out[entry]} == {entry}, cmd
    return out


def top_match(diagnosis) -> str | None:
    return next((f.id for f in diagnosis.findings if f.tier == "match"), None)


def evaluate() -> dict:
    from accuracy import DEV, load_cases

    from gpudoctor.engine.corroborate import corroborate
    from gpudoctor.engine.diagnose import diagnose
    from gpudoctor.engine.sources import resolve
    from gpudoctor.kb.catalog import load_catalog

    catalog = load_catalog(use_cache=False)
    by_entry = witnesses()
    cases = [c for c in load_cases(DEV, "manifest*.yaml") if str(c.get("source", "")).startswith("public")]
    rows = []
    for case in cases:
        alone = diagnose(catalog, resolve([str(case["abs"])]), engine="python")
        before = top_match(alone)
        for entry, ws in by_entry.items():
            after = top_match(corroborate(alone, ws, catalog))
            rows.append({"log": case["path"], "expect": case.get("expect"), "witness": entry,
                         "before": before, "after": after})
    own = [r for r in rows if r["witness"] == r["expect"]]
    other = [r for r in rows if r["witness"] != r["expect"]]
    return {
        "logs": len(cases), "pairs": len(rows),
        "own_pairs": len(own),
        "own_right_before": sum(r["before"] == r["expect"] for r in own),
        "own_right_after": sum(r["after"] == r["expect"] for r in own),
        "other_pairs": len(other),
        "taken_over": sum(r["after"] == r["witness"] and r["before"] != r["witness"] for r in other),
        "right_lost": sum(r["before"] == r["expect"] and r["after"] != r["expect"] for r in other),
        "negatives_made_confident": sum(r["expect"] is None and r["before"] is None and r["after"] is not None
                                        for r in other),
        "negative_pairs": sum(r["expect"] is None for r in other),
        "rows": rows,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="figures as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every take-over")
    args = parser.parse_args(argv)
    res = evaluate()
    rows = res.pop("rows")
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    pct = lambda a, b: f"{100 * a / b:.1f}%" if b else "-"  # noqa: E731
    print(f"{res['logs']} public dev logs x {len(SCRIPTS) + len(COMMANDS)} one-bug scripts and commands")
    print(f"script with the log's own bug ({res['own_pairs']} pairs): confident and right "
          f"{pct(res['own_right_before'], res['own_pairs'])} alone -> {pct(res['own_right_after'], res['own_pairs'])}")
    print(f"script with another entry's bug ({res['other_pairs']} pairs): taken over by the script's entry "
          f"{pct(res['taken_over'], res['other_pairs'])}, a right answer lost {pct(res['right_lost'], res['other_pairs'])}")
    print(f"negatives ({res['negative_pairs']} pairs): made confident "
          f"{pct(res['negatives_made_confident'], res['negative_pairs'])}")
    if args.verbose:
        for r in rows:
            if r["witness"] != r["expect"] and r["after"] == r["witness"] and r["before"] != r["witness"]:
                print(f"TAKEN {r['witness']:<4} over {str(r['expect']):<5} (was {r['before']}) {r['log']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
