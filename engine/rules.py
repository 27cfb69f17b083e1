"""Evidence from structure: where an error was raised (its frames, source lines, which rank) names its cause."""
from __future__ import annotations

import re

from gpudoctor.engine.findings import Evidence, Finding
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.zero_setup import SETUP_FRAME  # ZeRO's optimizer-state set-up, by its frames' names
from gpudoctor.kb.record import record, replace

RULE_SCORE = 0.9  # a rule reads the frames themselves: as strong as a specific signature


@record(frozen=True)
class Verdict:
    entry: str
    rule: str  # slug, shown as the evidence's signature: "rule:zero-init-oom"
    evidence: tuple[Evidence, ...]
    score: float = RULE_SCORE
    rule_out: bool = False  # the structure shows it is NOT this entry
    tier: str = "match"  # "possible": context that makes the entry likely without proving it
    note: str = ""


# --- tokens of the frames an error was raised through ---------------------------------------
# Read from the text around the error line rather than from a parsed traceback, so that plain, IPython
# ("File x.py:12, in f(...)"), Rich ("│ x.py:12 in f │") and prefixed tracebacks all count.

_OOM = _lazy(r"OutOfMemoryError|CUDA out of memory|HIP out of memory|CUBLAS_STATUS_ALLOC_FAILED|"
                  r"cudaErrorMemoryAllocation|Cuda failure 'out of memory'|CUDA error: out of memory")
# a literal of every _OOM alternative: str's search runs far ahead of a regex alternation over a whole 1 MB log
_OOM_WORDS = ("OutOfMemoryError", "out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "cudaErrorMemoryAllocation")
FRAMEISH = _lazy(r"""\.py["']?(?:, line |:)\d+|\.py\(\d+\)""")
_FSDP_PATH = _lazy(r"torch/distributed/(?:fsdp|_composable/fsdp|checkpoint|_state_dict_utils)|"
                        r"fsdp/_state_dict_utils|fully_sharded_data_parallel")
_FSDP_STATE = _lazy(r"\b(?:_full_post_state_dict_hook|_full_pre_state_dict_hook|_full_pre_load_state_dict_hook|"
                         r"_full_post_load_state_dict_hook|_post_state_dict_hook|_pre_state_dict_hook|"
                         r"_pre_load_state_dict_hook|_post_load_state_dict_hook|_gather_\w+|full_optim_state_dict|"
                         r"_optim_state_dict\w*|get_model_state_dict|get_optimizer_state_dict|_get_fsdp_state_dict|"
                         r"_state_dict_fn|FullStateDictConfig|FULL_STATE_DICT|full_state_dict|full_tensor|"
                         # the optimizer-state and DTensor gathers (fsdp/_optim_utils.py 2.0+, _state_dict_utils.py 2.2+)
                         r"_unflatten_optim_state|_communicate_optim_state|_allgather_orig_param_states|"
                         r"_convert_state_with_(?:orig|flat)_params|_all_gather_sharded_tensor|_offload_state_dict_to_cpu|"
                         r"_common_unshard_(?:pre|post)_state_dict_hook)\b")
# FSDP gathering a unit's full parameters for its forward or backward: FSDP1 (fsdp/_runtime_utils.py _unshard,
# _pre_forward_unshard; fsdp/_flat_param.py unshard, _alloc_padded_unsharded_flat_param, _all_gather_flat_param;
# torch 1.12-2.x) and fully_shard (_fsdp_param_group.py unshard, _fsdp_collectives.py foreach_all_gather; 2.4+)
_FSDP_UNSHARD = _lazy(r"(?:fsdp|_composable)[/\\]\S*\.py\S*,? (?:line \d+, )?in (?:\w+\.)?(?:_unshard|unshard|"
                           r"_pre_forward_unshard|_alloc_padded_unsharded_flat_param|_all_gather_flat_param|"
                           r"foreach_all_gather|alloc_all_gather_outputs)\b")
# the optimizer allocating or updating its moment estimates, the state ZeRO stage 1 and up shards: torch.optim's
# adam/adamw/... (_init_group's zeros_like, _single_tensor_*/_multi_tensor_*/_fused_* updates, 1.x's plain step),
# apex and DeepSpeed's FusedAdam, bitsandbytes' init_state; or the update's own source line (exp_avg, exp_avg_sq)
_OPTIM_STATE = _lazy(r"(?:torch[/\\]optim[/\\](?!lr_scheduler|swa_utils)\w+|apex[/\\]optimizers[/\\]\w+|"
                     r"deepspeed[/\\]ops[/\\]adam[/\\]\w+|bitsandbytes[/\\]optim[/\\]\w+)\.py\S*,? (?:line \d+, )?"
                     r"in (?:\w+\.)?(?:_init_group|_single_tensor_\w+|_multi_tensor_\w+|_fused_\w+|init_state|step)\b|"
                     r"\bexp_avg(?:_sq)?\b.*(?:zeros_like|\.sqrt\(|\.mul_\(|\.add_\(|\.lerp_\(|_foreach_)")
# reducer.cpp's "Expected to mark a variable ready only once" (torch 1.x-2.x) and its DETAIL form "... has been
# marked as ready twice", raised from a backward that torch.utils.checkpoint's reentrant CheckpointFunction runs
_READY_TWICE = _lazy(r"Expected to mark a variable ready only once|has been marked as ready twice")
_REENTRANT = _lazy(r"torch[/\\]utils[/\\]checkpoint\.py|\bCheckpointFunction\b")
_LOAD_MISMATCH = _lazy(r"Error\(s\) in loading state_dict|size mismatch for|Missing key\(s\) in state_dict|"
                            r"Unexpected key\(s\) in state_dict")
_LOAD_FN = _lazy(r"\b(?:_pre_load_state_dict_hook|_post_load_state_dict_hook|_full_pre_load_state_dict_hook|"
                      r"_full_post_load_state_dict_hook|set_model_state_dict|_load_model_state_dict|load_state_dict)\b")
# torch's runtime check, torch.cuda.get_device_properties' Python check, c10's CUDAContext assert: an index past the GPUs
INVALID_ORDINAL = _lazy(r"invalid device ordinal|cudaErrorInvalidDevice|CUDA_ERROR_INVALID_DEVICE|"
                              r"AssertionError: Invalid device id|device >= 0 && device < num_gpus INTERNAL ASSERT")
# Python's own out-of-memory (host RAM, not the GPU's), raised in a child that multiprocessing's spawn or forkserver
# start method is still setting up: CPython's Lib/multiprocessing/spawn.py _main (3.4-3.13) unpickles everything
# the parent handed over, `self = reduction.pickle.load(from_parent)`, the process object with its target's
# arguments (mp.spawn's, a DataLoader worker's copy of the dataset). Another copy per process did not fit.
_HOST_OOM = _lazy(r"(?<![\w.])MemoryError\b")
_SPAWN_CHILD = _lazy(r"\bpickle\.load\(from_parent\)|multiprocessing[/\\]spawn\.py\S*,? (?:line \d+, )?in "
                     r"(?:spawn_main|_main)\b")
LOOK_BACK = 150  # lines before an error line that may hold its traceback


def _frame_with(region: list[str], token: re.Pattern, path: re.Pattern | None = None) -> int | None:
    """Index of the last frame line (or the line after it, where Rich wraps the name) that names token."""
    for i in range(len(region) - 1, -1, -1):
        line = region[i]
        if not FRAMEISH.search(line):
            continue
        near = line + " " + (region[i + 1] if i + 1 < len(region) else "")
        if token.search(near) and (path is None or path.search(line.replace("\\", "/"))):
            return i
    return None


def _last_with(region: list[str], token: re.Pattern) -> int | None:
    """Index of the last line of the region (a frame or its source line) that holds token."""
    for i in range(len(region) - 1, -1, -1):
        if token.search(region[i]):
            return i
    return None


def clean_code(text: str) -> str:
    return " ".join(text.replace("│", " ").split())[:300]


def region_rules(lines: list[str], at: int, file: str, first_line: int) -> list[Verdict]:
    """Rules for the error on lines[at]; lines[:at] hold what was printed before it (its traceback)."""
    error = lines[at]
    region = lines[max(0, at - LOOK_BACK): at + 1]
    base = first_line + max(0, at - LOOK_BACK)
    here = Evidence(file, first_line + at, error, "")
    out: list[Verdict] = []

    def because(i: int, rule: str, what: str) -> tuple[Evidence, Evidence]:
        return (replace(here, signature=rule), Evidence(file, base + i, f"{what}: {clean_code(region[i])}", "because"))

    if _OOM.search(error):
        i = _frame_with(region, SETUP_FRAME)
        if i is not None:
            out.append(Verdict("D16", "rule:zero-init-oom",
                               because(i, "rule:zero-init-oom", "raised while DeepSpeed set up ZeRO optimizer state")))
        i = _frame_with(region, _FSDP_STATE)
        if i is not None and any(_FSDP_PATH.search(x.replace("\\", "/")) for x in region):
            out.append(Verdict("D15", "rule:fsdp-state-dict-oom",
                               because(i, "rule:fsdp-state-dict-oom", "raised while gathering a full FSDP state dict")))
        elif (i := _frame_with(region, _FSDP_UNSHARD)) is not None:
            out.append(Verdict("D12", "hint:oom-gathering-fsdp-unit", because(
                i, "hint:oom-gathering-fsdp-unit", "raised while FSDP gathered one unit's full parameters"),
                score=0.55, tier="possible"))
        if not out and (i := _last_with(region, _OPTIM_STATE)) is not None:
            out.append(Verdict("D16", "hint:oom-in-optimizer-state", because(
                i, "hint:oom-in-optimizer-state", "raised while the optimizer allocated or updated its moment estimates"),
                score=0.5, tier="possible"))
    elif _LOAD_MISMATCH.search(error):
        i = _frame_with(region, _LOAD_FN, _FSDP_PATH)
        if i is not None:
            out.append(Verdict("D15", "rule:fsdp-state-dict-load",
                               because(i, "rule:fsdp-state-dict-load", "raised while FSDP loaded a state dict")))
    elif _HOST_OOM.search(error) and (i := _last_with(region, _SPAWN_CHILD)) is not None:
        out.append(Verdict("D28", "rule:host-oom-unpickling-child", because(
            i, "rule:host-oom-unpickling-child", "raised while a new process unpickled its copy of what its parent "
            "holds (host RAM)")))
    if INVALID_ORDINAL.search(error):
        from gpudoctor.engine.ordinal_rules import ordinal_rule

        out.extend(ordinal_rule(region, here, base))
    if _READY_TWICE.search(error) and (i := _frame_with(region, _REENTRANT)) is not None:
        out.append(Verdict("D8", "rule:reentrant-checkpoint", because(
            i, "rule:reentrant-checkpoint", "raised in the backward of a reentrant activation checkpoint"),
            note="D8 here is a gradient marked ready twice by reentrant activation checkpointing, not an unused "
                 "parameter: checkpoint with use_reentrant=False (gpudoctor fix D8 --script ...), or give DDP "
                 "static_graph=True"))
    return out


_ZERO_IN_USE = _lazy(r"ZeRO stage [0-3]\b|zero_optimization|\"stage\":\s*[1-3]\b|zero_stage|deepspeed_stage_[1-3]|"
                          r"DeepSpeedZeroOptimizer|ZeRO-?(?:Offload|Infinity)|stage3_\w+|--zero[_-]stage|--deepspeed\b|"
                          r"deepspeed\.initialize|ds_config\w*\.json|DeepSpeedEngine")


def zero_oom_hint(lines: list[str], file: str, first_line: int) -> Verdict | None:
    """A CUDA OOM in a run that uses ZeRO, raised somewhere the frames do not show: D16 is possible."""
    oom = next((i for i, x in enumerate(lines) if _OOM.search(x) and not FRAMEISH.search(x)), None)
    if oom is None:
        return None
    zero = next((i for i, x in enumerate(lines) if _ZERO_IN_USE.search(x)), None)
    if zero is None:
        return None
    return Verdict("D16", "hint:oom-under-zero", (
        Evidence(file, first_line + oom, lines[oom], "hint:oom-under-zero"),
        Evidence(file, first_line + zero, lines[zero], "hint:oom-under-zero")), score=0.6, tier="possible")


# --- every input -----------------------------------------------------------------------------------

_TRIGGER = _lazy("|".join(r.pattern for r in (_OOM, _LOAD_MISMATCH, INVALID_ORDINAL, _READY_TWICE, _HOST_OOM)))
MAX_ERRORS = 32  # error lines examined per input


def zero_setup_rule(text: str, file: str) -> list[Verdict]:
    """A CUDA OOM after DeepSpeed's "Creating ... ZeRO stage N optimizer" / "Before initializing optimizer states" and
    before its set-up finished: the stage does not fit the memory (D16), even when no frame was printed. Weaker: a
    traceback cut off inside ZeRO's optimizer-state allocation, or a frameless OOM in a ZeRO run before any step."""
    from gpudoctor.engine.zero_setup import (oom_before_training_under_zero, oom_during_zero_setup,
                                             setup_traceback_cut_short)

    if any(words in text for words in _OOM_WORDS) and _OOM.search(text):
        found = oom_during_zero_setup(text, file)
        if found:
            return [Verdict("D16", "rule:oom-during-zero-setup", found)]
        found = oom_before_training_under_zero(text, file)
        return [Verdict("D16", "rule:oom-before-training-under-zero", found, score=0.6)] if found else []
    found = setup_traceback_cut_short(text, file) if "Traceback" in text else None
    return [Verdict("D16", "rule:zero-setup-traceback-cut", found, score=0.6)] if found else []


def sharded_load_rule(text: str, file: str) -> list[Verdict]:
    """load_state_dict size mismatches that differ only in dim 0 by one whole factor: a full checkpoint against
    sharded parameters or the reverse (D15)."""
    if "size mismatch for" not in text:
        return []
    from gpudoctor.engine.shard_load import sharded_full_mismatch

    found = sharded_full_mismatch(text, file)
    return [Verdict("D15", "rule:sharded-vs-full-load", found[1], score=found[0])] if found else []


def unwrapped(text: str) -> str:
    """A whole text as the scanner reads it: a paste hard-wrapped at a fixed width has its rows rejoined (each
    joined row keeps its first line number; the rows it took in become empty lines)."""
    from gpudoctor.engine.rewrap import detect_width, rejoin

    width = detect_width(text[: 1 << 16].encode("utf-8", "replace"))
    if not width:
        return text
    return rejoin(text.encode("utf-8", "replace"), width).decode("utf-8", "replace")


def evaluate(scans, texts: dict | None = None, dumps: dict | None = None) -> list[Verdict]:
    """Every rule's verdict. texts: the whole text of small inputs; for others, the scanner's windows
    (the lines after each traceback header) are read. dumps: name -> (text, rank) of stack dumps."""
    from gpudoctor.engine.ds_auto import auto_float_rule
    from gpudoctor.engine.init_wait import duplicate_rank_rule, init_wait_rule
    from gpudoctor.engine.nccl_rules import (coll_desync_rule, error_trace_rule, first_collective_rule, interface_rule,
                                             shared_device_rule, version_split_rule)
    from gpudoctor.engine.ds_no_sync import no_sync_rule
    from gpudoctor.engine.ordinal_rules import (accelerate_modulo_rule, device_list_rule, driver_ordinal_rule,
                                                failed_local_rank_rule, one_node_ordinal_rule,
                                                requested_devices_rule, several_per_node_ordinal_rule,
                                                spread_duplicates_rule)
    from gpudoctor.engine.nccl_tests import stopped_tests_rule
    from gpudoctor.engine.device_rules import device_rules
    from gpudoctor.engine.launch_rules import (dashed_local_rank_rule, interrupted_by_hand_rule, literal_local_rank_rule,
                                               one_process_killed_rule,
                                               peer_exited_cleanly_rule, silent_teardown_rule, visible_devices_rule)
    from gpudoctor.engine.gpu_table import stacked_processes_rule
    from gpudoctor.engine.group_rules import no_group_caller_rule
    from gpudoctor.engine.replica_rules import replica_rule
    from gpudoctor.engine.local_rank_rules import first_gpu_for_all_rule
    from gpudoctor.engine.port_rules import bind_errno_rule, second_rank_zero_rule, zmq_in_use_rule
    from gpudoctor.engine.progress_rules import unequal_lengths_rule
    from gpudoctor.engine.shm_rules import shm_rules
    from gpudoctor.engine.slow_step import slow_step_across, slow_step_rule
    from gpudoctor.engine.stall_rules import rank_zero_alone_rule

    verdicts: list[Verdict] = []
    texts = {name: unwrapped(text) for name, text in (texts or {}).items()}
    for _source, scan in scans:
        whole = texts.get(scan.name)
        if whole is not None:
            chunks = [(1, whole.splitlines())] if _TRIGGER.search(whole) else []
        else:
            chunks = [(line_no, lines) for opener, line_no, lines in scan.windows if opener in ("traceback", "root-cause")]
        if whole is not None:
            verdicts.extend(interface_rule(whole, scan.name))
            verdicts.extend(coll_desync_rule(whole, scan.name))
            verdicts.extend(version_split_rule(whole, scan.name))
            verdicts.extend(error_trace_rule(whole, scan.name))
            verdicts.extend(first_collective_rule(whole, scan.name))
            verdicts.extend(shared_device_rule(whole, scan.name))
            verdicts.extend(shm_rules(whole, scan.name))
            verdicts.extend(device_rules(whole, scan.name))
            verdicts.extend(zero_setup_rule(whole, scan.name))
            verdicts.extend(sharded_load_rule(whole, scan.name))
            verdicts.extend(auto_float_rule(whole, scan.name))
            verdicts.extend(init_wait_rule(whole, scan.name))
            verdicts.extend(duplicate_rank_rule(whole, scan.name))
            verdicts.extend(one_node_ordinal_rule(whole, scan.name) or failed_local_rank_rule(whole, scan.name)
                            or several_per_node_ordinal_rule(whole, scan.name))
            verdicts.extend(accelerate_modulo_rule(whole, scan.name) or spread_duplicates_rule(whole, scan.name))
            verdicts.extend(device_list_rule(whole, scan.name))
            verdicts.extend(driver_ordinal_rule(whole, scan.name))
            verdicts.extend(requested_devices_rule(whole, scan.name))
            verdicts.extend(no_sync_rule(whole, scan.name))
            verdicts.extend(slow_step_rule(whole, scan.name))
            verdicts.extend(unequal_lengths_rule(whole, scan.name))
            verdicts.extend(first_gpu_for_all_rule(whole, scan.name))
            verdicts.extend(stopped_tests_rule(whole, scan.name))
            verdicts.extend(stacked_processes_rule(whole, scan.name))
            verdicts.extend(bind_errno_rule(whole, scan.name))
            verdicts.extend(zmq_in_use_rule(whole, scan.name))
            verdicts.extend(literal_local_rank_rule(whole, scan.name))
            verdicts.extend(dashed_local_rank_rule(whole, scan.name))
            verdicts.extend(visible_devices_rule(whole, scan.name))
            verdicts.extend(one_process_killed_rule(whole, scan.name))
            verdicts.extend(interrupted_by_hand_rule(whole, scan.name))
            verdicts.extend(silent_teardown_rule(whole, scan.name))
            verdicts.extend(peer_exited_cleanly_rule(whole, scan.name))
            verdicts.extend(rank_zero_alone_rule(whole, scan.name))
            verdicts.extend(no_group_caller_rule(whole, scan.name))
            verdicts.extend(replica_rule(whole, scan.name))
        seen = 0
        if chunks and whole is not None:
            hint = zero_oom_hint(chunks[0][1], scan.name, 1)
            if hint is not None:
                verdicts.append(hint)
        for first, lines in chunks:
            for at, line in enumerate(lines):
                if seen < MAX_ERRORS and _TRIGGER.search(line) and not FRAMEISH.search(line):
                    seen += 1
                    verdicts.extend(region_rules(lines, at, scan.name, first))
    if len(texts) > 1:
        verdicts.extend(second_rank_zero_rule(texts))
        if not any(v.rule == "rule:step-as-long-as-timeout" for v in verdicts):
            verdicts.extend(slow_step_across(texts))
    if dumps:
        from gpudoctor.engine.hangs import hang_rules

        verdicts.extend(hang_rules(dumps))
    return _one_node_outranks_global_rank(verdicts)


# rules that show the failing process's global rank equals its local rank: there a device index taken from the global
# rank is the one the local rank gives, so the source line that reads the global rank is not what went wrong
_GLOBAL_IS_LOCAL = ("rule:ordinal-on-one-node", "rule:ordinal-at-local-rank")


def _one_node_outranks_global_rank(verdicts: list[Verdict]) -> list[Verdict]:
    files = {v.evidence[0].file for v in verdicts if v.rule in _GLOBAL_IS_LOCAL}
    if not files:
        return verdicts
    return [v for v in verdicts if not (v.rule == "rule:ordinal-by-global-rank" and v.evidence[0].file in files)]


def merge(entries: dict, findings: list[Finding], verdicts: list[Verdict]) -> tuple[list[Finding], list[str]]:
    """Findings with the rules folded in (new ones added, evidence joined, ruled-out ones dropped), and notes."""
    by_id = {f.id: f for f in findings}
    notes: list[str] = []
    noted: set[tuple[str, str, bool]] = set()  # one note per rule and entry: a second traceback says it again

    def note(v: Verdict) -> None:
        if v.note and v.note not in notes and (v.rule, v.entry, v.rule_out) not in noted:
            noted.add((v.rule, v.entry, v.rule_out))
            notes.append(v.note)

    ruled_out = {v.entry for v in verdicts if v.rule_out}
    confirmed = {v.entry for v in verdicts if not v.rule_out and v.tier == "match"}
    for v in verdicts:
        if v.tier != "match":
            continue
        if v.rule_out and v.entry not in confirmed:
            note(v)
            continue
        if v.rule_out or v.entry not in entries:
            continue
        f = by_id.get(v.entry)
        if f is None:
            entry = entries[v.entry]
            by_id[v.entry] = Finding(id=entry.id, title=entry.title, score=v.score, evidence=v.evidence,
                                     fix=entry.fix_summary, probes=entry.probes, signatures=(v.rule,),
                                     explains=tuple(t for t in entry.explains if t in by_id))
        else:
            # one line once: the rule's evidence first, a signature's hit on the same line adds nothing to read
            first: dict[tuple, Evidence] = {}
            for e in v.evidence + f.evidence:
                first.setdefault((e.file, e.line, e.text), e)
            evidence = tuple(first.values())[:8]
            sigs = f.signatures + ((v.rule,) if v.rule not in f.signatures else ())
            by_id[v.entry] = replace(f, score=max(f.score, v.score), evidence=evidence, signatures=sigs)
        note(v)  # what the structure says about how this entry came about
    for eid in ruled_out - confirmed:
        by_id.pop(eid, None)
    out = list(by_id.values())
    out.sort(key=lambda f: (-f.score, f.consequence_of != (), f.id))
    return out, notes


def annotate(findings: list[Finding]) -> list[Finding]:
    """Each finding with the meaning of any NCCL result or CUDA error its evidence lines name."""
    from gpudoctor.engine.errcodes import explain

    out, shown = [], set()  # a meaning is told once, under the first finding whose lines carry it
    for f in findings:
        extra, seen = [], set()
        for ev in f.evidence:
            for meaning in explain(ev.text):
                if meaning.code not in seen | shown and len(seen) < 3:
                    seen.add(meaning.code)
                    extra.append(Evidence(ev.file, ev.line, str(meaning), "meaning"))
        shown |= seen
        out.append(replace(f, evidence=f.evidence + tuple(extra)) if extra else f)
    return out
