"""Evidence from structure: where an error was raised (its frames, source lines, which rank) names its cause."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from gpudoctor.engine.findings import Evidence, Finding

RULE_SCORE = 0.9  # a rule reads the frames themselves: as strong as a specific signature


@dataclass(frozen=True)
class Verdict:
    entry: str
    rule: str  # slug, shown as the evidence's signature: "rule:zero-init-oom"
    evidence: tuple[Evidence, ...]
    score: float = RULE_SCORE
    rule_out: bool = False  # the structure shows it is NOT this entry
    note: str = ""


# --- the frames of one raised exception ----------------------------------------------

_OOM = re.compile(r"OutOfMemoryError|CUDA out of memory|HIP out of memory|CUBLAS_STATUS_ALLOC_FAILED|"
                  r"cudaErrorMemoryAllocation|Cuda failure 'out of memory'")
_ZERO_FILE = re.compile(r"deepspeed/runtime/zero/(?:stage_1_and_2|stage3|stage2|stage1|partition_parameters|"
                        r"parameter_offload|partitioned_param_coordinator)\.py$")
_ZERO_INIT_FN = re.compile(r"^(?:__init__|initialize_optimizer_states|_create_fp32_partitions|_setup_for_real_optimizer|"
                           r"_create_fp16_partitions\w*|_create_fp16_sub_groups|_configure_tensor_swapping|"
                           r"_link_all_hp_params|_create_param_mapping|_partition_param\w*|partition|_post_init_method|"
                           r"_convert_to_deepspeed_param|_zero_init_param|_init_\w+)$")
_DS_ENGINE_INIT = re.compile(r"^_configure_zero_optimizer$")
_FSDP_FILE = re.compile(r"torch/distributed/(?:fsdp|_composable/fsdp|checkpoint)/|torch/distributed/tensor/")
_FSDP_STATE_FN = re.compile(r"^(?:_full_post_state_dict_hook|_full_pre_state_dict_hook|_post_state_dict_hook|"
                            r"_pre_state_dict_hook|_full_pre_load_state_dict_hook|_full_post_load_state_dict_hook|"
                            r"_pre_load_state_dict_hook|_post_load_state_dict_hook|_gather_\w*|_get_fsdp_state_dict|"
                            r"get_model_state_dict|get_optimizer_state_dict|get_state_dict|set_model_state_dict|"
                            r"_state_dict_fn|_get_state_dict\w*|_load_model_state_dict|_full_tensor|full_tensor|"
                            r"full_optim_state_dict|_optim_state_dict\w*|optim_state_dict)$")
_FULL_STATE_SOURCE = re.compile(r"FullStateDictConfig|FULL_STATE_DICT|full_state_dict|FullOptimStateDictConfig|"
                                r"full_optim_state_dict|get_model_state_dict|get_state_dict")
_LOAD_MISMATCH = re.compile(r"Error\(s\) in loading state_dict|size mismatch for|Missing key\(s\) in state_dict|"
                            r"Unexpected key\(s\) in state_dict")
_INVALID_ORDINAL = re.compile(r"invalid device ordinal|cudaErrorInvalidDevice|CUDA_ERROR_INVALID_DEVICE")
_DEVICE_CALL = re.compile(r"set_device\(|\.cuda\(|torch\.device\(|\.to\(|device_ids\s*=|cuda:\{|\"cuda:\"\s*\+|"
                          r"f[\"']cuda:")
_LOCAL_INDEX = re.compile(r"local[_-]?rank|LOCAL_RANK|local_process_index|get_local_rank|localrank|gpu_id|"
                          r"args\.gpu\b|local_device")
_GLOBAL_INDEX = re.compile(r"(?<![\w.])(?:(?:args|opt|self|config|cfg|params|hparams|H)\.)?rank\b|\bRANK\b|"
                           r"get_rank\(\)|global_rank|world_rank|\bprocess_index\b")


def _all_frames(tb):
    """Every frame of the printed chain, innermost last."""
    frames = []
    for exc in tb.chain:
        frames.extend(exc.frames)
    return frames


def _norm(path: str) -> str:
    return path.replace("\\", "/")


def _frame_text(frame) -> str:
    return f'File "{frame.file}", line {frame.line}, in {frame.function}' + (f": {frame.source}" if frame.source else "")


def traceback_rules(tb, file: str, line: int, text: str) -> list[Verdict]:
    """Rules over one exception chain; `line`/`text` locate its exception line in the input."""
    frames = _all_frames(tb)
    message = f"{tb.exc_type}: {tb.message}"
    chain_text = " ".join(f"{e.exc_type}: {e.message}" for e in tb.chain)
    here = Evidence(file, line, text, "")
    out: list[Verdict] = []
    if _OOM.search(chain_text):
        zero = [f for f in frames if (_ZERO_FILE.search(_norm(f.file)) and _ZERO_INIT_FN.match(f.function or ""))
                or (_norm(f.file).endswith("deepspeed/runtime/engine.py") and _DS_ENGINE_INIT.match(f.function or ""))]
        if zero:
            out.append(Verdict("D16", "rule:zero-init-oom", (
                replace(here, signature="rule:zero-init-oom"),
                Evidence(file, line, "raised while DeepSpeed set up ZeRO state: " + _frame_text(zero[-1]), "because"))))
        fsdp = [f for f in frames if (_FSDP_STATE_FN.match(f.function or "") and _FSDP_FILE.search(_norm(f.file)))
                or (f.is_user and f.source and _FULL_STATE_SOURCE.search(f.source))]
        if fsdp and any(_FSDP_FILE.search(_norm(f.file)) for f in frames):
            out.append(Verdict("D15", "rule:fsdp-state-dict-oom", (
                replace(here, signature="rule:fsdp-state-dict-oom"),
                Evidence(file, line, "raised while gathering a full FSDP state dict: " + _frame_text(fsdp[-1]), "because"))))
    elif _LOAD_MISMATCH.search(chain_text):
        fsdp = [f for f in frames if _FSDP_FILE.search(_norm(f.file)) and _FSDP_STATE_FN.match(f.function or "")]
        if fsdp:
            out.append(Verdict("D15", "rule:fsdp-state-dict-load", (
                replace(here, signature="rule:fsdp-state-dict-load"),
                Evidence(file, line, "raised while FSDP loaded a state dict: " + _frame_text(fsdp[-1]), "because"))))
    if _INVALID_ORDINAL.search(message):
        out.extend(_ordinal_rule(frames, here))
    return out


def _ordinal_rule(frames, here: Evidence) -> list[Verdict]:
    """invalid device ordinal: the global rank as a device index is D3; the local rank means too few GPUs."""
    calls = [f for f in frames if f.source and _DEVICE_CALL.search(f.source)
             and not re.search(r"\bdevice\)\s*$|_cuda_setDevice\(device\)", f.source)]
    for frame in reversed(calls):  # the innermost call that still shows which number it passed
        src = frame.source or ""
        arg = src[src.find("("):] if "(" in src else src
        if _LOCAL_INDEX.search(arg):
            return [Verdict("D3", "rule:ordinal-by-local-rank", (replace(here, signature="rule:ordinal-by-local-rank"),),
                            rule_out=True,
                            note=f"not D3: line {here.line} sets the device by the local rank ({src.strip()[:80]}); "
                                 f"an invalid ordinal then means more processes per node than visible GPUs")]
        if _GLOBAL_INDEX.search(arg):
            return [Verdict("D3", "rule:ordinal-by-global-rank", (
                replace(here, signature="rule:ordinal-by-global-rank"),
                Evidence(here.file, here.line, "the device index is the global rank: " + _frame_text(frame), "because")))]
    return []


# --- every input: tracebacks from the scan windows, stacks from hang dumps ----------------------------


def evaluate(scans, dumps: dict | None = None) -> list[Verdict]:
    """Every rule's verdict over the scanned sources; dumps maps a source name to its text when it held stack dumps."""
    from gpudoctor.engine.structure import parse_tracebacks

    verdicts: list[Verdict] = []
    seen: set[tuple[str, int]] = set()
    for _source, scan in scans:
        for opener, line_no, lines in scan.windows:
            if opener not in ("traceback", "root-cause"):
                continue
            for tb in parse_tracebacks(lines):
                if not tb.exc_type or tb.exc_type == "Fatal Python error":
                    continue
                at = _exception_at(lines, tb)
                key = (scan.name, line_no + at)
                if key in seen:
                    continue
                seen.add(key)
                verdicts.extend(traceback_rules(tb, scan.name, line_no + at, lines[at]))
    if dumps:
        from gpudoctor.engine.hangs import hang_rules

        verdicts.extend(hang_rules(dumps))
    return verdicts


def _exception_at(lines: list[str], tb) -> int:
    name = tb.exc_type.rsplit(".", 1)[-1]
    for i in range(min(tb.end, len(lines)) - 1, tb.start - 1, -1):
        if name + ":" in lines[i] or lines[i].strip().endswith(name):
            return i
    return tb.start


def merge(entries: dict, findings: list[Finding], verdicts: list[Verdict]) -> tuple[list[Finding], list[str]]:
    """Findings with the rules folded in (new ones added, evidence joined, ruled-out ones dropped), and notes."""
    by_id = {f.id: f for f in findings}
    notes: list[str] = []
    ruled_out = {v.entry for v in verdicts if v.rule_out}
    confirmed = {v.entry for v in verdicts if not v.rule_out}
    for v in verdicts:
        if v.rule_out and v.entry not in confirmed:
            if v.note and v.note not in notes:
                notes.append(v.note)
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
            evidence = tuple(dict.fromkeys(v.evidence + f.evidence))[:8]
            sigs = f.signatures + ((v.rule,) if v.rule not in f.signatures else ())
            by_id[v.entry] = replace(f, score=max(f.score, v.score), evidence=evidence, signatures=sigs)
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
