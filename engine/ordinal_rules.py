"""Which GPU index a process took, and what an index past the GPUs or a shared GPU says: more processes on a node than
GPUs (D27) or a device chosen by the global rank (D3).

From the traceback (`ordinal_rule`, called by rules.region_rules for each invalid-ordinal error): the device call
nearest the error and the index it passed (the local rank, mp.spawn's index, the global rank), or a library frame that
sets the device by the local index (accelerate, transformers, DeepSpeed).

From the rest of the log: the launch it echoes (`one_node_ordinal_rule`), torchelastic's root-cause block, accelerate's
state, NCCL's refusal of shared GPUs, trainers' device checks. On one node torchrun, torch.distributed.launch,
accelerate and the deepspeed launcher give every process a global rank equal to its local rank, so a device chosen by
RANK instead of LOCAL_RANK (D3) picks the same GPU it should; an index past the GPUs can then only come from more
processes on the node than it has GPUs (or a hard-coded index, which a launch of several processes makes the rarer
reading). The launch is read from the command the log echoes: torchrun with --standalone or without --nnodes above 1
(torchrun's default is one node), and no sign anywhere of a second node (a node rank above 0, --nnodes, num_machines
or --num_nodes above 1, a hostfile's second host).
"""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.rules import FRAMEISH, INVALID_ORDINAL as _ORDINAL, Verdict, clean_code
from gpudoctor.kb.record import replace

# --- the traceback of an invalid ordinal: which index the failing call passed -------------------------------

_DEVICE_CALL = _lazy(r"set_device\s*\(|\.cuda\s*\(|torch\.device\s*\(|\.to\s*\(|device_ids\s*=|cuda:\{|"
                          r"[\"']cuda:[\"']\s*\+|get_device_(?:properties|name|capability)\s*\(|"
                          r"cuda\.Device\s*\(|cuda\.select_device\s*\(")  # CuPy, Numba
_PASSTHROUGH = _lazy(r"_cuda_setDevice\(|(?:set_device|get_device_properties|get_device_name|get_device_capability)"
                          r"\(\s*(?:device|self\.device|dev|d|device_index)\s*\)")
# (gpu_id, not gpu_ids: a list of GPU ids from the options is a configured device, not a per-node process index)
_LOCAL_INDEX = _lazy(r"local[_-]?rank|LOCAL_RANK|local_process_index|get_local_rank|localrank|gpu_id\b|"
                          r"args\.gpu\b|local_device")
_GLOBAL_INDEX = _lazy(r"(?<![\w.])(?:(?:args|opt|self|config|cfg|params|hparams|H)\.)?rank\b|\bRANK\b|"
                           r"get_rank\(\)|global_rank|world_rank|\bprocess_index\b|\bhvd[._]rank\b")  # Horovod
# a bare `rank` is only known to be global when nothing says otherwise: under mp.spawn it is usually the spawn index
_GLOBAL_EXPLICIT = _lazy(r"\bRANK\b|get_rank\(\)|global_rank|world_rank|\bprocess_index\b|\.rank\b|\bhvd_rank\b")
# library code that picks the device by the process's local index and then sets it, so that an invalid ordinal raised
# inside means more processes on the node than GPUs it can see: accelerate's PartialState (0.x: __init__ or
# set_device, `torch.device("cuda", self.local_process_index)`; 1.x takes it modulo the device count and cannot raise
# it), transformers' TrainingArguments._setup_devices (4.x: `torch.device("cuda", self.local_rank)` or PartialState's
# device), DeepSpeed's engine (_set_distributed_vars: `set_device(device_rank)`, the local rank unless args say)
_LIB_LOCAL_DEVICE = _lazy(r"accelerate[/\\]state\.py\S*,? line \d+, in (?:set_device|__init__)\b|"
                          r"transformers[/\\]training_args\.py\S*,? line \d+, in _setup_devices\b|"
                          r"deepspeed[/\\]runtime[/\\]engine\.py\S*,? line \d+, in _set_distributed_vars\b")
_SPAWNED = _lazy(r"-- Process \d+ terminated with the following error|ProcessRaisedException|"
                      r"torch[/\\]multiprocessing[/\\]spawn\.py")


def ordinal_rule(region: list[str], here: Evidence, base: int) -> list[Verdict]:
    """invalid device ordinal: the global rank as a device index is D3; the local rank means too few GPUs."""
    for i in range(len(region) - 2, -1, -1):  # the call nearest the error that still shows which number it passed
        src = region[i]
        lib = _LIB_LOCAL_DEVICE.search(src) or (_LIB_LOCAL_DEVICE.search(region[i - 1]) if i else None)
        if lib:  # the library's frame, or the source line under it
            at = i if lib.string is src else i - 1
            return _too_many_ranks("rule:ordinal-in-library-local-device", here, base + at,
                                   lib.group(0).replace('"', ""), "the local process index", "processes")
        m = _DEVICE_CALL.search(src)
        if not m or _PASSTHROUGH.search(src) or FRAMEISH.search(src):
            continue
        arg = src[m.start():]
        code = clean_code(src)
        if _LOCAL_INDEX.search(arg):
            return _too_many_ranks("rule:ordinal-by-local-rank", here, base + i, code, "the local rank", "processes")
        if _GLOBAL_INDEX.search(arg) and not _GLOBAL_EXPLICIT.search(arg) and any(map(_SPAWNED.search, region)):
            return _too_many_ranks("rule:ordinal-by-spawn-index", here, base + i, code, "the index mp.spawn passed",
                                   "spawned processes", ", which counts the processes of one machine")
        if _GLOBAL_INDEX.search(arg):
            return [Verdict("D3", "rule:ordinal-by-global-rank", (
                replace(here, signature="rule:ordinal-by-global-rank"),
                Evidence(here.file, base + i, f"the device index is the global rank: {code}", "because")))]
        return []
    return []


def _too_many_ranks(rule: str, here: Evidence, line: int, code: str, index: str, what: str,
                    aside: str = "") -> list[Verdict]:
    """A device picked by a per-node index that is out of range: more ranks on the node than GPUs (D27), not D3."""
    why = Evidence(here.file, line, f"the device index is {index}: {code}", "because")
    return [Verdict("D3", rule, (replace(here, signature=rule),), rule_out=True,
                    note=f"not D3: line {line} sets the device by {index}{aside} ({code[:80]}); an invalid ordinal then "
                         f"means more {what} on the node than visible GPUs (D27)"),
            Verdict("D27", rule, (replace(here, signature=rule), why))]


# --- the rest of the log: the launch, torchelastic's summary, accelerate's state, NCCL, trainers' checks ------

# a launch of several processes per node, as echoed: the launcher, then its per-node process count above 1
_LAUNCH = _lazy(r"(?:\btorchrun\b|torch\.distributed\.(?:launch|run)\b|\baccelerate launch\b|^\s*(?:\S+/)?deepspeed\s)"
                r".*?--(?:nproc[_-]per[_-]node|num[_-]processes|num[_-]gpus)[= ]+([2-9]|\d\d+)\b")
_MULTI_ON_LINE = _lazy(r"--(?:nnodes|num[_-]machines|num[_-]nodes)[= ]+(?:\d+:)?(?:[2-9]|\d\d+)\b|"
                       r"--(?:node[_-]rank|machine[_-]rank)[= ]+[1-9]|--hostfile|--master[_-]addr[= ]+(?!localhost|127\.)")
_MULTI = _lazy(r"\bnode_rank\W{1,3}[1-9]|\bGROUP_RANK\W{1,3}[1-9]|\bnum_machines\W{1,3}(?:[2-9]|\d\d)|"
               r"\bnnodes\W{1,3}(?:[2-9]|\d\d)|--num[_-]nodes[= ]+(?:[2-9]|\d\d)|SLURM_(?:JOB_)?NNODES=(?:[2-9]|\d\d)|"
               r"Running on the following workers: \S+,")


# torch.distributed.launch (1.x) and torchrun (torch/distributed/run.py, 1.9-2.x) print this banner only when
# OMP_NUM_THREADS is unset and the per-node process count is above 1: "Setting OMP_NUM_THREADS environment variable for
# each process to be 1 in default, ..."
# torchelastic's agent tearing the node's other workers down after one failed (elastic/multiprocessing/api.py,
# torch 1.9-2.x: "Sending process %s closing signal %s"): it signals workers it started on this node, so there were two
# or more
_SEVERAL_PER_NODE = _lazy(r"Setting OMP_NUM_THREADS environment variable for each process to be \d+ in default|"
                          r"Sending process \d+ closing signal SIG[A-Z]+")
# DeepSpeed's init_distributed, once per process (deepspeed/comm/comm.py, 0.8-0.16: "cdb={cdb}" before a backend is
# made): two of them in one console are two processes writing to it
_DS_PROCESS_START = _lazy(r"\[comm\.py:\d+:init_distributed\] cdb=None")


def one_node_ordinal_rule(text: str, file: str) -> list:
    """D27 (and D3 ruled out) for an invalid device ordinal under a one-node launch of several processes."""
    if not _ORDINAL.search(text):
        return []
    lines = text.splitlines()
    error = next((i for i, line in enumerate(lines) if _ORDINAL.search(line)), None)
    launch = next((i for i, line in enumerate(lines) if _LAUNCH.search(line)), None)
    if error is None or launch is None:
        return []
    if _MULTI_ON_LINE.search(lines[launch]) or _MULTI.search(text):
        return []
    n = _LAUNCH.search(lines[launch]).group(1)
    return _d27_not_d3("rule:ordinal-on-one-node", file, error + 1, lines[error], launch + 1,
                       f"{n} processes per node on one node, where the global rank is the local rank: "
                       f"{' '.join(lines[launch].split())[:160]}",
                       "launches one node, where a device chosen by RANK is the one LOCAL_RANK picks")


def several_per_node_ordinal_rule(text: str, file: str) -> list:
    """The launcher's OMP_NUM_THREADS banner, torchelastic's agent signalling the node's other workers, or DeepSpeed's
    per-process start-up line printed more than once, in place of the echoed command: several processes on this node,
    and no sign anywhere of a second node. Without the command the node count is not seen, so the score stays under
    the echoed launch's (a reading for logs where neither the command nor torchelastic's summary says more)."""
    if not any(k in text for k in ("OMP_NUM_THREADS", "closing signal", "cdb=None")) or not _ORDINAL.search(text):
        return []
    lines = text.split("\n")  # numbered as line_at numbers them
    error = next((i for i, line in enumerate(lines) if _ORDINAL.search(line)), None)
    banner = next((i for i, line in enumerate(lines) if _SEVERAL_PER_NODE.search(line)), None)
    if banner is None:
        starts = [i for i, line in enumerate(lines) if _DS_PROCESS_START.search(line)]
        banner = starts[1] if len(starts) > 1 else None
    if error is None or banner is None or _MULTI.search(text) or any(_MULTI_ON_LINE.search(line) for line in lines):
        return []
    why = ("the launcher set OMP_NUM_THREADS for each process, which it does only when it starts more than one "
           "process on the node" if "OMP_NUM_THREADS" in lines[banner] else
           "torchelastic's agent signals another worker it started on this node: there were several"
           if "closing signal" in lines[banner] else
           "DeepSpeed's start-up line, which each process prints once, is printed again in this console")
    verdicts = _d27_not_d3("rule:ordinal-under-several-per-node", file, error + 1, lines[error], banner + 1, why,
                           "shows several processes on this node and no second node")
    return [replace(v, score=0.6) if not v.rule_out else v for v in verdicts]


def _d27_not_d3(rule: str, file: str, line_no: int, line: str, why_no: int, why: str, shows: str) -> list:
    """The invalid ordinal on line_no is D27 and not D3, because line why_no `shows` that RANK is LOCAL_RANK there."""
    here = Evidence(file, line_no, line, rule)
    note = f"not D3: line {why_no} {shows}; an invalid ordinal there means more processes than visible GPUs (D27)"
    return [Verdict("D3", rule, (here,), rule_out=True, note=note),
            Verdict("D27", rule, (here, Evidence(file, why_no, why, "because")), score=0.7)]


# torchelastic's failure summary (torch/distributed/elastic/multiprocessing/errors/__init__.py, 1.9+): the block
# after "Root Cause (first observed failure):" names the rank that failed first as "rank : 1 (local_rank: 1)"
_ROOT_CAUSE = _lazy(r"Root Cause \(first observed failure\):\s*\n(?:.*\n){0,4}?\s*rank\s*:\s*(\d+) \(local_rank:\s*(\d+)\)")


def failed_local_rank_rule(text: str, file: str) -> list:
    """D27 (and D3 ruled out) when torchelastic's summary says the rank that failed first with an invalid device
    ordinal had a global rank equal to its local rank, above 0: for that process RANK and LOCAL_RANK pick the same
    device, so choosing by RANK (D3) changed nothing, and its local rank is past the GPUs the node shows."""
    if "Root Cause" not in text or not _ORDINAL.search(text):
        return []
    m = _ROOT_CAUSE.search(text)
    if m is None or m.group(1) != m.group(2) or m.group(2) == "0":
        return []
    from gpudoctor.engine.textfind import line_at

    error_no, error = line_at(text, _ORDINAL.search(text).start())
    rank_no, _ = line_at(text, m.start(1))
    rank = m.group(1)
    return _d27_not_d3("rule:ordinal-at-local-rank", file, error_no, error, rank_no,
                       f"the rank that failed first is rank {rank} with local rank {rank}: its global and local rank "
                       "pick the same GPU",
                       f"shows rank {rank} failed first with local rank {rank}, so a device chosen by RANK is the one "
                       "LOCAL_RANK picks")


# accelerate's state as the script logs it (PartialState.__repr__): "Local process index: 3" then "Device: cuda:0"
_ACC_STATE = _lazy(r"Local process index: (\d+)\s*\n\s*Device: cuda:(\d+)")
_SHARED_GPU = _lazy(r"Duplicate GPU detected|ncclInvalidUsage|invalid usage")


def accelerate_modulo_rule(text: str, file: str) -> list:
    """D27 (and D3 ruled out) when accelerate put a local process on a GPU other than its index and NCCL then found
    two ranks on one GPU. accelerate (0.2x-1.x, PartialState.set_device) picks `local_process_index % device_count()`:
    a device index below the process index means fewer visible GPUs than local processes, so processes share a GPU;
    the device came from the local index, not the global rank, so it is not D3. (Every process on cuda:0 without NCCL's
    refusal is a per-task GPU binding, as under srun --gpus-per-task, and is left alone.)"""
    shared = _SHARED_GPU.search(text) if "Local process index" in text else None
    if shared is None:
        return []
    from gpudoctor.engine.textfind import line_at

    for m in _ACC_STATE.finditer(text):
        index, device = int(m.group(1)), int(m.group(2))
        if device == index:
            continue
        line_no, line = line_at(text, m.end())  # the "Device: cuda:N" line
        here = Evidence(file, line_no, line, "rule:accelerate-shares-gpus")
        why = Evidence(file, *line_at(text, shared.start()), "because")
        note = (f"line {line_no}: accelerate put local process {index} on cuda:{device}; it maps processes onto "
                f"GPUs modulo the visible count, so this node runs more processes than it has GPUs (D27), not a "
                f"device chosen by the global rank (D3)")
        return [Verdict("D3", "rule:accelerate-shares-gpus", (here,), rule_out=True, note=note),
                Verdict("D27", "rule:accelerate-shares-gpus", (here, why), score=0.9)]
    return []


# a list of the node's devices indexed by the local rank, as Horovod's guides write it for TensorFlow
# (`gpus = tf.config.list_physical_devices('GPU')`, then `set_visible_devices(gpus[hvd.local_rank()], 'GPU')`), and
# the same with a list of device ids
_DEVICE_LIST_BY_LOCAL = _lazy(r"\b(?:\w*gpus|\w*devices|gpu_ids|device_ids)\s*\[\s*(?:\w+\.)*local_rank(?:\(\))?\s*\]")
_LIST_INDEX = _lazy(r"IndexError: list index out of range")


def device_list_rule(text: str, file: str) -> list:
    """D27 for an IndexError raised on a line that indexes the node's device list by the local rank: the list of
    GPUs the process can see is shorter than the local rank, so there are more processes on the node than GPUs."""
    if "list index out of range" not in text or "local_rank" not in text:
        return []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not _LIST_INDEX.search(line):
            continue
        src = next((k for k in range(i - 1, max(-1, i - 4), -1) if _DEVICE_LIST_BY_LOCAL.search(lines[k])), None)
        if src is None:
            continue
        code = " ".join(lines[src].split())[:160]
        why = Evidence(file, src + 1, f"the node's device list is indexed by the local rank: {code}", "because")
        here = Evidence(file, i + 1, line, "rule:device-list-by-local-rank")
        return [Verdict("D27", "rule:device-list-by-local-rank", (here, why), score=0.8)]
    return []


# ultralytics' select_device (8.x, ultralytics/utils/torch_utils.py) refuses a device list the machine cannot serve
# and prints what torch sees: "Invalid CUDA 'device=0,1' requested. ..." then "torch.cuda.device_count(): 1"
_REQUESTED = _lazy(r"Invalid CUDA '(?:--)?device[= ]([\d,\s]+)' requested")
_COUNT = _lazy(r"torch\.cuda\.device_count\(\): (\d+)")


def requested_devices_rule(text: str, file: str) -> list:
    """D27 when a trainer refused a list of more GPUs than torch can see, and at least one GPU is visible: one process
    per listed GPU means more processes than GPUs. With no GPU visible at all the cause is a CPU-only torch or a
    driver, and a single id or ids past the count but no more of them than GPUs are a wrong index: silent there."""
    if "requested" not in text or "device_count" not in text:
        return []
    m = _REQUESTED.search(text)
    count = _COUNT.search(text, m.end()) if m else None
    if m is None or count is None:
        return []
    ids = [int(d) for d in m.group(1).replace(" ", "").split(",") if d]
    visible = int(count.group(1))
    if len(ids) < 2 or visible < 1 or len(ids) <= visible:
        return []  # one GPU, or ids past the count but no more of them than GPUs: a wrong index, not too many ranks
    from gpudoctor.engine.textfind import line_at

    here = Evidence(file, *line_at(text, m.start()), "rule:requested-devices-past-count")
    why = Evidence(file, line_at(text, count.start())[0],
                   f"{len(ids)} GPU(s) requested ({m.group(1).strip()}) where torch sees {visible}", "because")
    return [Verdict("D27", "rule:requested-devices-past-count", (here, why), score=0.8)]


# NCCL's refusal of two ranks on one GPU (src/init.cc, 2.4-2.2x), after the debug prefix (src/debug.cc:
# "host:pid:tid [cudaDev]") that names the host: "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1b000"
_DUPLICATE = _lazy(r"(?:^|[\s\]])([\w.-]{1,253}):\d{1,10}:\d{1,10} \[\d{1,3}\] (?:\S+ )?NCCL WARN "
                   r"Duplicate GPU detected ?: "
                   r"rank \d+ and rank \d+ both on CUDA device (?:0x)?([0-9a-fA-F]{1,16})")


def spread_duplicates_rule(text: str, file: str) -> list:
    """D27 (and D3 ruled out) when NCCL refused shared GPUs on one host for two or more different GPUs. Ranks that all
    landed on the first GPU (D3) share one device; several devices each shared by two ranks mean the ranks were spread
    over every GPU the host shows and wrapped around: the host runs more ranks than it has GPUs."""
    if "Duplicate GPU" not in text:
        return []
    buses: dict[str, dict[str, int]] = {}  # host -> bus id -> offset of its first warning
    for m in _DUPLICATE.finditer(text):
        buses.setdefault(m.group(1), {}).setdefault(m.group(2).lower(), m.start(2))
    host, seen = next(((h, b) for h, b in buses.items() if len(b) >= 2), (None, None))
    if host is None:
        return []
    from gpudoctor.engine.textfind import line_at

    first = min(seen.values())
    here = Evidence(file, *line_at(text, first), "rule:duplicate-gpu-on-several-devices")
    ids = ", ".join(sorted(seen)[:6])
    why = Evidence(file, here.line, f"on {host}, NCCL found ranks sharing {len(seen)} different GPUs (bus ids {ids})",
                   "because")
    note = (f"not D3: on {host} the shared GPUs are {len(seen)} different devices, not every rank on the first one; "
            "ranks spread over all the GPUs and wrapped around, so the host runs more ranks than GPUs (D27)")
    return [Verdict("D3", "rule:duplicate-gpu-on-several-devices", (here,), rule_out=True, note=note),
            Verdict("D27", "rule:duplicate-gpu-on-several-devices", (here, why), score=0.9)]


# CUDA's own words (cudaGetErrorString) for a driver that cannot serve the runtime: cudaErrorInsufficientDriver (35),
# cudaErrorCallRequiresNewerDriver (36), cudaErrorSystemDriverMismatch (803), cudaErrorCompatNotSupportedOnDevice (804)
_DRIVER_FAILS = _lazy(r"CUDA driver version is insufficient for CUDA runtime version|"
                      r"API call is not supported in the installed CUDA driver|"
                      r"system has unsupported display driver / cuda driver combination|"
                      r"forward compatibility was attempted on non supported HW")


def driver_ordinal_rule(text: str, file: str) -> list:
    """D3 and D27 ruled out for an invalid device ordinal in a log where CUDA also reports a driver that cannot serve
    the runtime: with the driver refusing calls, a device query fails whatever index it is given, so the ordinal
    error says nothing of which GPU a rank chose or how many ranks a node runs (a driver/toolkit mismatch)."""
    if "driver" not in text and "forward compatibility" not in text:
        return []  # (plain substring tests first: a regex scan of every log costs milliseconds)
    driver = _DRIVER_FAILS.search(text)
    ordinal = _ORDINAL.search(text) if driver else None
    if ordinal is None:
        return []
    from gpudoctor.engine.textfind import line_at

    line_no, line = line_at(text, ordinal.start())
    driver_no, _ = line_at(text, driver.start())
    rule = "rule:ordinal-beside-driver-failure"
    note = (f"line {driver_no}: CUDA reports \"{driver.group(0)}\"; with a driver that cannot serve the CUDA runtime "
            f"the invalid device ordinal on line {line_no} follows from the driver, not from the device index a rank "
            "chose (D3) or from more ranks than GPUs (D27)")
    here = Evidence(file, line_no, line, rule)
    return [Verdict("D3", rule, (here,), rule_out=True, note=note), Verdict("D27", rule, (here,), rule_out=True)]
