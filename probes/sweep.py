"""The collectives probe's arithmetic: message sizes, nccl-tests' algbw/busbw table, the straggler, the verdict."""
from __future__ import annotations

from gpudoctor.probes import linkspeed
from gpudoctor.probes.base import Result, confirmed, entry_ids, ruled_out

WARMUP = 5  # nccl-tests' defaults: -w 5 -n 20
ITERS = 20
STRAGGLER_RATIO = 1.5  # a rank 50% slower than the median at the same local work
STRAGGLER_MIN_S = 0.02  # and at least this much behind, so timer noise never names one
MAX_RANK_LINES = 8


def message_sizes(max_bytes: int, gpu: bool) -> list[int]:
    """8 B upward, doubling on GPUs as nccl-tests does (-f 2), quadrupling on CPU where each size costs more."""
    factor, size, sizes = (2 if gpu else 4), 8, []
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    if sizes[-1] != max_bytes and max_bytes > 8:
        sizes.append(max_bytes)
    return sizes


def iterations(size: int, gpu: bool) -> int:
    """nccl-tests' 20 timed iterations; fewer for big CPU messages so the probe stays quick."""
    return ITERS if gpu else max(5, min(ITERS, (64 << 20) // max(size, 1)))


def bus_factor(world: int) -> float:
    """nccl-tests' all_reduce correction: busbw = algbw * 2(n-1)/n."""
    return 2 * (world - 1) / world if world > 1 else 0.0


def human_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:g} {unit}" if unit == "B" else f"{size:.0f} {unit}"
        size /= 1024
    return f"{size} B"



def table(gathered: list[dict], world: int) -> list[dict]:
    """One row per size every rank finished: the slowest rank's time sets the collective's time."""
    per_size: dict[int, list[float]] = {}
    for stats in gathered:
        for size, seconds in stats.get("sweep", []):
            per_size.setdefault(int(size), []).append(float(seconds))
    rows = []
    for size in sorted(per_size):
        times = per_size[size]
        if len(times) < len(gathered):
            continue
        t = max(times)
        algbw = size / t / 1e9 if t > 0 else 0.0
        rows.append({"bytes": size, "time_us": t * 1e6, "algbw_gbs": algbw, "busbw_gbs": algbw * bus_factor(world)})
    return rows


def find_straggler(gathered: list[dict]) -> dict | None:
    """The rank whose local work took longest; `lag_s` is how long the others waited for it."""
    timed = [s for s in gathered if "compute_s" in s]
    if len(timed) < 2:
        return None
    slowest = max(timed, key=lambda s: s["compute_s"])
    others = sorted(s["compute_s"] for s in timed if s is not slowest)
    median = others[len(others) // 2]
    waits = [s["barrier_wait_s"] for s in timed if s is not slowest]
    return {"rank": slowest["rank"], "host": slowest.get("host"), "compute_s": slowest["compute_s"],
            "median_s": median, "lag_s": slowest["compute_s"] - median,
            "others_waited_s": sum(waits) / len(waits) if waits else 0.0}


def analyse(gathered: list[dict | None], world: int, backend: str, deaths: dict[int, str],
            link: linkspeed.Link | None, why_no_link: str, oversubscribed: bool, multi_node: bool) -> Result:
    """Rank 0's verdict from every rank's figures (None for a rank that never reported)."""
    present = [s for s in gathered if s]
    hosts = sorted({s.get("host", "?") for s in present})
    inits = [s["init_s"] for s in present if "init_s" in s]
    evidence = [f"{backend} on {'cuda' if backend == 'nccl' else 'cpu'}: {world} ranks on {len(hosts)} host(s)"
                + (f", group formed in {max(inits):.2f} s" if inits else "")]
    if len(present) == world and all(s.get("correct") for s in present):
        evidence.append("all_reduce and all_gather results correct on every rank")
    rows = table(present, world)
    figures: dict = {"world_size": world, "backend": backend, "hosts": hosts, "table": rows}
    evidence += table_lines(rows)
    problems: list[tuple[str, str]] = []
    for rank, stats in enumerate(gathered):
        if not stats:
            how = deaths.get(rank)
            if how:  # it started and died: the others wait for it, D20's hang
                problems.append(("D20", f"rank {rank} never reported (it died: {how}); its peers block in the next "
                                        "collective until the timeout"))
            else:  # nothing says it failed: it never joined
                problems.append(("MN2" if multi_node else "", f"rank {rank} never joined: not started, or it cannot "
                                 "reach MASTER_ADDR:MASTER_PORT (another port, a firewall, a wrong address)"))
    for stats in present:
        problems += _rank_problems(stats, world, multi_node)
    if rows and link and rows[-1]["bytes"] >= linkspeed.BANDWIDTH_REGIME_BYTES:
        healthy, text = linkspeed.verdict(rows[-1]["busbw_gbs"], link)
        evidence.append(f"link: {text}")
        figures["link"] = {"name": link.name, "peak_gbs": link.peak_gbs, "healthy": healthy}
        if not healthy:
            problems.append(("MN2", text))
    else:
        evidence.append(f"link: {why_no_link or 'messages too small to judge bandwidth'}")
    straggler = find_straggler(present)
    if straggler:
        figures["straggler"] = straggler
        evidence.append(f"slowest rank {straggler['rank']} ({straggler['host']}): local work "
                        f"{straggler['compute_s'] * 1e3:.1f} ms vs median {straggler['median_s'] * 1e3:.1f} ms; "
                        f"the others waited {straggler['others_waited_s'] * 1e3:.1f} ms at the barrier")
        if oversubscribed:
            evidence.append("more CPU ranks than cores: the straggler figure is scheduling noise here")
        elif (straggler["lag_s"] >= STRAGGLER_MIN_S
              and straggler["compute_s"] >= STRAGGLER_RATIO * straggler["median_s"]):
            problems.append(("D20", f"rank {straggler['rank']} on {straggler['host']} is a straggler: "
                                    f"{straggler['compute_s'] / max(straggler['median_s'], 1e-9):.1f}x the "
                                    "median time for the same work"))
    evidence += rank_lines(present)
    if problems:
        entries = entry_ids(e for e, _ in problems)
        return confirmed(problems[0][1], evidence + [f"{e or 'problem'}: {t}" for e, t in problems[1:]],
                         figures, entries)
    best = rows[-1] if rows else None
    if best:
        summary = f"busbw {gbs(best['busbw_gbs'])} GB/s at {human_bytes(best['bytes'])} on {world} {backend} ranks"
    else:
        summary = f"results correct on {world} {backend} ranks"
    if straggler:
        summary += f"; slowest rank {straggler['rank']}"
    return ruled_out(summary, evidence, figures, ("MN2", "MN4") if multi_node else ())


def _rank_problems(stats: dict, world: int, multi_node: bool = True) -> list[tuple[str, str]]:
    problems = []
    rank, error = stats.get("rank"), stats.get("error")
    if error and stats.get("stage") == "init":  # on one host no interface is chosen: a rank that never came
        problems.append(("MN2" if multi_node else "", f"rank {rank}: the process group did not form: {error}"))
    elif error and "failed_at" in stats:
        passed = [size for size, _ in stats.get("sweep", [])]
        if passed:
            problems.append(("MN4", f"rank {rank}: all_reduce passes up to {human_bytes(max(passed))} but fails at "
                                    f"{human_bytes(stats['failed_at'])}: large messages die (MTU path?)"))
        else:
            problems.append(("MN3", f"rank {rank}: {error}"))
    elif error:
        problems.append(("MN3", f"rank {rank}: {error}"))
    if stats.get("correct") is False:
        problems.append(("", f"rank {rank}: all_reduce returned wrong values"))
    seen = stats.get("ranks_seen")
    if seen is not None and sorted(seen) != list(range(world)):
        problems.append(("D1", f"all_gather saw ranks {seen}: two processes share a RANK"))
    return problems


def gbs(value: float) -> str:
    """Bandwidth with as many digits as it deserves: 0.06, 3.4, 123."""
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def table_lines(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    lines = [f"{'size':>10} {'time (us)':>11} {'algbw GB/s':>11} {'busbw GB/s':>11}"]
    for row in rows:
        lines.append(f"{human_bytes(row['bytes']):>10} {row['time_us']:>11.1f} {row['algbw_gbs']:>11.3f} "
                     f"{row['busbw_gbs']:>11.3f}")
    return lines


def rank_lines(present: list[dict]) -> list[str]:
    lines = []
    for stats in present[:MAX_RANK_LINES]:
        parts = [f"rank {stats.get('rank')} {stats.get('host', '?')} pid {stats.get('pid', '?')}"]
        if "init_s" in stats:
            parts.append(f"init {stats['init_s']:.2f} s")
        if "compute_s" in stats:
            parts.append(f"work {stats['compute_s'] * 1e3:.1f} ms, waited {stats['barrier_wait_s'] * 1e3:.1f} ms")
        lines.append(", ".join(parts))
    if len(present) > MAX_RANK_LINES:
        lines.append(f"... {len(present) - MAX_RANK_LINES} more ranks in --json")
    return lines
