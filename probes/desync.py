"""The desync toolkit (D9, D19, D21, D22): does this environment name a mismatched collective and time out promptly?"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from datetime import timedelta
from typing import Mapping

from gpudoctor.probes import hostinfo, ranks
from gpudoctor.probes.base import Result, confirmed, ruled_out, skipped

TIMEOUT_S = 1.0  # the group timeout the scenarios run with; "prompt" means within this plus SLACK_S
SLACK_S = 5.0
MISMATCH_TEXT = "Detected mismatch between collectives"

# name -> (what it imitates, whether TORCH_DISTRIBUTED_DEBUG=DETAIL is on)
SCENARIOS = {
    "shapes": ("ranks all_reduce tensors of different shapes (D22's uneven last batch)", True),
    "ops": ("rank 0 calls all_reduce while rank 1 calls broadcast (D21)", True),
    "skipped": ("rank 1 skips a collective rank 0 enters (D9, D21: the `if rank == 0:` deadlock)", True),
    "shapes-without-detail": ("the same shape mismatch without DETAIL, for contrast", False),
}


def scenario_rank(rank: int, world: int, plan: dict) -> dict:
    """One rank of one scenario: it must raise (named mismatch or timeout) rather than hang."""
    import torch
    import torch.distributed as dist

    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL" if plan["detail"] else "OFF"
    dist.set_debug_level_from_env()  # the level is read once at import; the fork inherited the parent's
    gpu = plan["backend"] == "nccl"
    device = torch.device("cuda", rank) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    store = dist.FileStore(plan["store"], world)
    dist.init_process_group(plan["backend"], store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=plan["timeout_s"]))
    start = time.monotonic()
    name = plan["name"]
    try:
        if name.startswith("shapes"):
            tensor = torch.ones(4 if rank == 0 else 8, device=device)
            dist.all_reduce(tensor)
        elif name == "ops":
            tensor = torch.ones(4, device=device)
            dist.all_reduce(tensor) if rank == 0 else dist.broadcast(tensor, src=0)
        elif name == "skipped":
            tensor = torch.ones(4, device=device)
            if rank == 0:
                dist.all_reduce(tensor)
            else:
                time.sleep(plan["timeout_s"] + SLACK_S + 5)  # never reaches the collective
        if gpu:
            torch.cuda.synchronize()
        outcome = {"rank": rank, "raised": False, "seconds": time.monotonic() - start}
    except Exception as exc:
        outcome = {"rank": rank, "raised": True, "seconds": time.monotonic() - start,
                   "error": f"{type(exc).__name__}: {exc}".replace("\n", " ")[:400]}
    return outcome


def _scenario_member(index: int, total: int, plans: list[dict]) -> dict:
    """Ranks of all scenarios start as one batch: index 2k and 2k+1 are ranks 0 and 1 of scenario k."""
    return scenario_rank(index % 2, 2, plans[index // 2])


def run_scenarios(names: list[str], backend: str, timeout_s: float, method: str) -> list[dict]:
    """Run the scenarios side by side (one timeout in all, not one each) and report what rank 0 of each saw."""
    import torch.distributed  # noqa: F401  (imported once here, inherited by every fork: seconds per rank saved)

    workdir = tempfile.mkdtemp(prefix="gpudoctor-desync-")
    plans = [{"name": n, "detail": SCENARIOS[n][1], "backend": backend, "timeout_s": timeout_s,
              "store": os.path.join(workdir, f"store-{n}")} for n in names]
    try:
        outcomes = ranks.run_local(2 * len(names), _scenario_member, (plans,), timeout_s + SLACK_S + 10,
                                   method=method, wait_for=range(0, 2 * len(names), 2))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results = []
    for k, name in enumerate(names):
        rank0 = outcomes[2 * k]
        seconds = (rank0.payload or {}).get("seconds", rank0.seconds)
        results.append({"name": name, "rank0": rank0.payload, "died_from": rank0.died_from,
                        "exitcode": rank0.exitcode, "seconds": seconds if seconds is not None else float("inf")})
    return results


def judge(result: dict, timeout_s: float) -> tuple[bool, str]:
    """(works as D19 promises, one line saying what rank 0 saw)."""
    name, payload = result["name"], result["rank0"] or {}
    prompt = result["seconds"] <= timeout_s + SLACK_S
    if payload.get("raised"):
        error = payload.get("error", "")
        if name in ("shapes", "ops"):
            named = MISMATCH_TEXT in error
            return named and prompt, (f"named in {payload['seconds']:.1f} s: {_short(error)}" if named
                                      else f"raised without naming the mismatch: {_short(error)}")
        return prompt, f"raised after {payload['seconds']:.1f} s: {_short(error)}"
    if result["died_from"]:
        return name == "skipped" and prompt, (f"rank 0 died from {result['died_from']} after "
                                              f"{result['seconds']:.1f} s, no report naming the mismatch")
    if payload and not payload.get("raised"):
        return False, "the mismatched collective completed without any error"
    return False, f"no answer within {result['seconds']:.0f} s: a silent hang"


def probe(options: Mapping) -> Result:
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        return skipped("this torch has no torch.distributed")
    gpus = torch.cuda.device_count() if torch.version.cuda and torch.cuda.is_available() else 0
    backend = options.get("backend") or ("nccl" if gpus >= 2 and dist.is_nccl_available() else "gloo")
    if backend == "nccl" and gpus < 2:
        return skipped("the nccl scenarios need two GPUs")
    timeout_s = float(options.get("desync_timeout_s") or TIMEOUT_S)
    method = "spawn" if backend == "nccl" else "fork"
    if backend == "nccl":  # one pair of GPUs: the scenarios take turns
        results = [r for name in SCENARIOS for r in run_scenarios([name], backend, timeout_s, method)]
    else:
        results = run_scenarios(list(SCENARIOS), backend, timeout_s, method)
    evidence = [f"{backend}, 2 ranks, group timeout {timeout_s:g} s, TORCH_DISTRIBUTED_DEBUG=DETAIL"]
    figures: dict = {"backend": backend, "timeout_s": timeout_s, "scenarios": {}}
    failures = []
    for result in results:
        works, line = judge(result, timeout_s)
        what, detail = SCENARIOS[result["name"]]
        evidence.append(f"{result['name']}: {line}")
        figures["scenarios"][result["name"]] = {"ok": works, "seconds": round(min(result["seconds"], 1e6), 2),
                                                "died_from": result["died_from"]}
        if detail and not works:
            failures.append(f"{what}: {line}")
    if hostinfo.environ(options).get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL":
        evidence.append("note: DETAIL is set for the job itself; keep it for diagnosis, not production (D19)")
    if failures:
        return confirmed("this environment does not report a desync as D19 expects: " + failures[0],
                         evidence, figures, ("D19",))
    skipped_s = figures["scenarios"].get("skipped", {}).get("seconds", timeout_s)
    # what this shows is the tooling: this torch names a mismatch under DETAIL and ends a skipped collective at its
    # timeout; it rules out nothing about the user's own job (QA25b B6), so it names no entry
    return ruled_out(f"mismatches named; a skipped collective timed out in {skipped_s:.1f} s (run the job with "
                     "TORCH_DISTRIBUTED_DEBUG=DETAIL to see its own)", evidence, figures, ())


def _short(text: str, limit: int = 90) -> str:
    text = text.split("TensorDtypes")[0].rstrip(", ")
    return text if len(text) <= limit else text[: limit - 3] + "..."
