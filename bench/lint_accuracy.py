"""Accuracy of `gpudoctor lint`: false alarms on real distributed training code, recall on our buggy scripts.

Real code: pinned wheels of well-known projects are downloaded (`pip download --no-deps`) into a cache
outside the repository (~/.cache/gpudoctor-bench, or GPUDOCTOR_BENCH_CACHE), unpacked there, and every
file that sets up a process group, a device mesh, a launcher object or a sampler is linted. Each
error-severity finding is printed for review. Target: at most 1 error per 10 files.

Recall: every script in tests/data/lint/buggy/ marks its bug with `# expect: ID` on the buggy line; a hit
is that entry reported on that line. Target >= 90%. The hard correct cases in tests/data/lint/correct/ must
give no error. Exit 1 when a target is missed.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "lint"
CACHE = Path(os.environ.get("GPUDOCTOR_BENCH_CACHE", Path.home() / ".cache" / "gpudoctor-bench"))
PINNED = [  # project, version: each ships distributed training entry points inside its wheel
    ("torchtune", "0.6.1"),  # recipes/*_distributed.py
    ("accelerate", "1.6.0"),  # accelerate/test_utils/scripts/
    ("torchtitan", "0.3.0"),  # torchtitan/train.py and friends
    ("open_clip_torch", "3.3.0"),  # open_clip_train/
    ("litgpt", "0.5.13"),  # litgpt/pretrain.py, finetune/
    ("pytorch_ignite", "0.5.5"),  # ignite/distributed/
    ("mmengine", "0.10.7"),  # mmengine/dist, runner
    ("trl", "1.16.0"),  # trl/scripts/, trainers
    ("ai2_olmo", "0.6.0"),  # olmo/train.py, scripts
    ("lightning", "2.5.2"),  # lightning/fabric and lightning/pytorch strategies, rank-zero utilities
    ("mosaicml", "0.31.0"),  # composer/trainer, composer/utils/dist.py, callbacks
    ("megatron_core", "0.13.0"),  # megatron/core: parallel state, distributed checkpointing
    ("deepspeed", "0.17.2"),  # sdist: deepspeed/runtime/engine.py (save_checkpoint), launcher
    ("llm_foundry", "0.20.0"),  # llmfoundry: train/eval entry points on composer
    ("fairscale", "0.4.13"),  # sdist: FSDP/OSS ancestors, benchmarks with their own training loops
    ("axolotl", "0.12.2"),  # axolotl: train, evaluate, callbacks
]
SETUP = re.compile(r"init_process_group|DistributedSampler|init_device_mesh|Accelerator\(|PartialState\(|"
                   r"Fabric\(|deepspeed\.initialize|DistributedDataParallel\(")
EXPECT = re.compile(r"#\s*expect:\s*([A-Z]+\d+)")


def fetch(offline: bool) -> list[Path]:
    CACHE.mkdir(parents=True, exist_ok=True)
    roots = []
    for name, version in PINNED:
        archive = _archive(name, version)
        if archive is None and not offline:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-build-isolation", "-q",
                            "--dest", str(CACHE), f"{name}=={version}"], check=False, stderr=subprocess.DEVNULL)
            archive = _archive(name, version)
        if archive is None:
            print(f"  skipped {name}=={version}: not in the cache", file=sys.stderr)
            continue
        target = CACHE / "unpacked" / f"{name}-{version}"
        if not target.exists():
            _unpack(archive, target)
        roots.append(target)
    return roots


def _archive(name: str, version: str) -> Path | None:
    stem = name.replace("-", "_")
    return next(CACHE.glob(f"{stem}-{version}-*.whl"), None) or next(CACHE.glob(f"{stem}-{version}.tar.gz"), None)


def _unpack(archive: Path, target: Path) -> None:
    """Only the Python and shell files; a source archive is read with tarfile's safe 'data' filter."""
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(target, [n for n in zf.namelist() if n.endswith((".py", ".sh"))])
        return
    import tarfile

    with tarfile.open(archive) as tf:
        members = [m for m in tf.getmembers() if m.isfile() and m.name.endswith((".py", ".sh"))]
        tf.extractall(target, members, filter="data")


def real_code(offline: bool, verbose: bool) -> dict:
    from gpudoctor.engine.lint import lint_source

    files = errors = 0
    per_project = {}
    for root in fetch(offline):
        n_files = n_err = 0
        for path in sorted(root.rglob("*.py")):
            text = path.read_text(encoding="utf-8", errors="replace")
            if not SETUP.search(text):
                continue
            n_files += 1
            result = lint_source(text, str(path))
            bad = [f for f in result.findings if f.severity == "error"]
            n_err += len(bad)
            for f in bad:
                print(f"  {path.relative_to(CACHE / 'unpacked')}:{f.line}: {f.entry_id} {f.message[:110]}")
            if verbose:
                for f in result.findings:
                    if f.severity != "error":
                        print(f"    ({f.severity}) {path.relative_to(CACHE / 'unpacked')}:{f.line}: {f.entry_id}")
        per_project[root.name] = (n_files, n_err)
        files += n_files
        errors += n_err
    return {"files": files, "errors": errors, "per_project": per_project}


def recall() -> dict:
    from gpudoctor.engine.lint import lint_paths

    expected, found, missed = 0, 0, []
    for path in sorted([*(DATA / "buggy").glob("*.py"), *(DATA / "buggy").glob("*.sh"),
                        *(DATA / "buggy").glob("*.sbatch")]):
        lines = path.read_text(encoding="utf-8").splitlines()
        result = lint_paths([str(path)])
        got = {(f.entry_id, f.line) for f in result.findings}
        for n, line in enumerate(lines, 1):
            m = EXPECT.search(line)
            if m:
                expected += 1
                if (m.group(1), n) in got:
                    found += 1
                else:
                    missed.append(f"{path.name}:{n} {m.group(1)} (got {sorted(got)})")
    false_alarms = []
    correct = sorted([*(DATA / "correct").glob("*.py"), *(DATA / "correct").glob("*.sbatch")])
    for path in correct:
        for f in lint_paths([str(path)]).findings:
            if f.severity == "error":
                false_alarms.append(f"{path.name}:{f.line} {f.entry_id}")
    return {"expected": expected, "found": found, "missed": missed, "correct_files": len(correct),
            "false_alarms": false_alarms}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--offline", action="store_true", help="use only wheels already in the cache")
    ap.add_argument("--verbose", action="store_true", help="also list warnings and notes on real code")
    args = ap.parse_args(argv)
    print("real code (error-severity findings, each to review):")
    real = real_code(args.offline, args.verbose)
    for name, (n, e) in real["per_project"].items():
        print(f"  {name:<28} {n:>4} files  {e:>3} errors")
    per10 = 10 * real["errors"] / real["files"] if real["files"] else 0.0
    print(f"real code: {real['errors']} errors in {real['files']} files = {per10:.2f} per 10 files (target <= 1)")
    rec = recall()
    rate = rec["found"] / rec["expected"] if rec["expected"] else 0.0
    for m in rec["missed"]:
        print(f"  missed {m}")
    for m in rec["false_alarms"]:
        print(f"  false alarm on a correct script: {m}")
    print(f"recall on buggy scripts: {rec['found']}/{rec['expected']} = {rate:.0%} (target >= 90%)")
    print(f"correct scripts: {len(rec['false_alarms'])} errors in {rec['correct_files']} files (target 0)")
    ok = per10 <= 1.0 and rate >= 0.9 and not rec["false_alarms"] and real["files"] > 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
