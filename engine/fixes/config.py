"""Config patches that keep the file's own layout: DeepSpeed JSON values edited in place, Accelerate YAML by line."""
from __future__ import annotations

import json
import re

from gpudoctor.engine.fixes.errors import FixError, NotApplicable

# the values the HF Trainer / Accelerate fill in themselves when the JSON says "auto"
DS_AUTO_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping")


def string_end(text: str, i: int) -> int:
    """The index after the JSON string that opens at text[i] (its escapes skipped)."""
    j, n = i + 1, len(text)
    while j < n and text[j] != '"':
        j += 2 if text[j] == "\\" else 1
    return min(j + 1, n)


def _top_level_values(text: str) -> dict[str, tuple[int, int, int, int]]:
    """Top-level key -> (line start, value start, value end, line end) of its scalar value."""
    spans: dict[str, tuple[int, int, int, int]] = {}
    depth, i, n = 0, 0, len(text)
    key = None
    while i < n:
        ch = text[i]
        if ch == '"':
            j = string_end(text, i) - 1
            token = text[i: j + 1]
            after = text[j + 1:].lstrip()
            if depth == 1 and after.startswith(":"):
                key = json.loads(token), i
            elif depth == 1 and key is not None:
                _record(spans, text, key, i, j + 1)
                key = None
            i = j + 1
            continue
        if ch in "{[":
            depth += 1
            key = None if depth > 2 else key
        elif ch in "}]":
            depth -= 1
        elif depth == 1 and key is not None and ch not in " \t\r\n:":
            m = re.compile(r"-?[0-9][0-9.eE+-]*|true|false|null").match(text, i)
            if m:
                _record(spans, text, key, i, m.end())
                i = m.end()
                key = None
                continue
        i += 1
    return spans


def _record(spans, text, key, start, end) -> None:
    name, key_start = key
    line_start = text.rfind("\n", 0, key_start) + 1
    line_end = text.find("\n", end)
    spans[name] = (line_start, start, end, len(text) if line_end < 0 else line_end)


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list) -> dict:
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


def _load_json(text: str, path: str) -> dict:
    """The config as DeepSpeed reads it; a key twice in one object is refused: Python's json keeps the last one,
    and an edit of the first would change nothing that runs."""
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as exc:
        raise FixError(f"{path}: the key {exc.args[0]!r} appears twice in one object; DeepSpeed uses the last one. "
                       "Remove the other first") from None
    except json.JSONDecodeError as exc:
        raise FixError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise FixError(f"{path}: expected a JSON object at the top level")
    return data


def ds_auto(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """Every batch/accumulation/clipping value that HF or Accelerate also controls becomes "auto"."""
    data = _load_json(text, path)
    present = [k for k in DS_AUTO_KEYS if k in data and data[k] != "auto"]
    missing_acc = "gradient_accumulation_steps" not in data
    if not present and not missing_acc:
        raise NotApplicable(f"{path}: the batch, accumulation and clipping values are already \"auto\"")
    spans = _top_level_values(text)
    out = text
    for key in sorted(present, key=lambda k: -spans[k][1] if k in spans else 0):
        if key not in spans:
            raise NotApplicable(f"{path}: {key} is not a plain value gpudoctor can edit in place")
        _, start, end, _ = spans[key]
        out = out[:start] + '"auto"' + out[end:]
    if missing_acc:
        out = _add_key(out, "gradient_accumulation_steps", '"auto"')
    notes = [f"set the real numbers once, in TrainingArguments or the Accelerate config "
             f"({', '.join(present + (['gradient_accumulation_steps'] if missing_acc else []))} now read \"auto\")",
             "plain DeepSpeed (no HF Trainer or Accelerate) needs numbers, not \"auto\""]
    return _checked_json(out, path), notes


def ds_drop_global_batch(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """Drop train_batch_size when the micro batch and accumulation are given: DeepSpeed derives it from the world size."""
    data = _load_json(text, path)
    if "train_batch_size" not in data:
        raise NotApplicable(f"{path}: has no train_batch_size to drop")
    if not ("train_micro_batch_size_per_gpu" in data and "gradient_accumulation_steps" in data):
        raise NotApplicable(f"{path}: keep train_batch_size: the micro batch or the accumulation steps are not set")
    spans = _top_level_values(text)
    if "train_batch_size" not in spans:
        raise NotApplicable(f"{path}: train_batch_size is not a plain value gpudoctor can edit in place")
    line_start, _, value_end, line_end = spans["train_batch_size"]
    rest = text[value_end:line_end]
    if rest.strip() == ",":
        out = text[:line_start] + text[line_end + 1:]
    else:  # the last key: its line goes, and so does the comma before it
        out = text[:line_start] + text[line_end + 1:]
        prev = out.rfind(",", 0, line_start)
        if prev >= 0 and not out[prev + 1: line_start].strip():
            out = out[:prev] + out[prev + 1:]
    return _checked_json(out, path), _batch_notes(data, facts)


def ds_keep_global_batch(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """gradient_accumulation_steps set so that micro batch x accumulation x world size is the train_batch_size the
    config asks for, on the world size the log states: the global batch stays what the user chose."""
    data = _load_json(text, path)
    micro, asked = data.get("train_micro_batch_size_per_gpu"), data.get("train_batch_size")
    world = facts.get("world_size")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (micro, asked)):
        raise NotApplicable(f"{path}: needs whole numbers for train_batch_size and train_micro_batch_size_per_gpu")
    if not isinstance(world, int) or world < 1:
        raise NotApplicable(f"{path}: the world size is not known: give --param world_size=N (or the log that "
                            "states it)")
    if asked % (micro * world):
        raise NotApplicable(f"{path}: train_batch_size {asked} is not a multiple of micro batch x world size "
                            f"({micro} x {world}): no whole accumulation keeps it")
    accum = asked // (micro * world)
    if data.get("gradient_accumulation_steps") == accum:
        raise NotApplicable(f"{path}: gradient_accumulation_steps is already {accum}")
    spans = _top_level_values(text)
    if "gradient_accumulation_steps" in data:
        if "gradient_accumulation_steps" not in spans:
            raise NotApplicable(f"{path}: gradient_accumulation_steps is not a plain value gpudoctor can edit in place")
        _, start, end, _ = spans["gradient_accumulation_steps"]
        out = text[:start] + str(accum) + text[end:]
    else:
        out = _add_key(text, "gradient_accumulation_steps", str(accum))
    return _checked_json(out, path), [f"the global batch stays {asked}: {micro} x {accum} x {world} on the "
                                      f"{world} ranks the log states (with a different world size the assertion "
                                      "returns: set it again)"]


def _batch_notes(data: dict, facts: dict) -> list[str]:
    """What the global batch becomes without train_batch_size, in numbers when the log gave the world size, and the
    accumulation that would keep the one the config asked for."""
    micro, accum, asked = (data.get(k) for k in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                                                  "train_batch_size"))
    world = facts.get("world_size")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (micro, accum, asked, world)):
        return ["DeepSpeed now computes the global batch as micro batch x accumulation x world size (give "
                "--param world_size=N to see it in numbers)"]
    if micro * accum * world == asked:  # after keep-global-batch set the accumulation: the drop changes nothing
        return [f"the global batch stays {asked} ({micro} x {accum} x {world})"]
    notes = [f"the global batch becomes {micro} x {accum} x {world} = {micro * accum * world} (the config asked for "
             f"{asked})"]
    if asked % (micro * world) == 0:
        notes.append(f"to keep {asked} instead, set gradient_accumulation_steps to {asked // (micro * world)} and keep "
                     "train_batch_size")
    return notes


def _add_key(text: str, key: str, value: str) -> str:
    """Add a top-level key after the last top-level value, in the file's indentation."""
    end = text.rstrip().rfind("}")
    body = text[:end].rstrip()
    indent = re.search(r"\n([ \t]+)\"", text)
    pad = indent.group(1) if indent else "  "
    sep = "," if not body.endswith("{") else ""
    return f"{body}{sep}\n{pad}{json.dumps(key)}: {value}\n{text[end:]}"


def _checked_json(text: str, path: str) -> str:
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        raise FixError(f"internal: editing {path} broke its JSON ({exc.msg})") from None
    return text


_YAML_KEY = r"^({key}):([ \t]*)([^#\n]*?)([ \t]*#[^\n]*)?$"


def _set_yaml(text: str, key: str, value: str) -> tuple[str, bool]:
    """Set a top-level `key: value` line in place (its comment kept), or append it; True when the text changed."""
    pattern = re.compile(_YAML_KEY.format(key=re.escape(key)), re.M)
    m = pattern.search(text)
    if m:
        if m.group(3).strip() == value:
            return text, False
        line = f"{key}:{m.group(2) or ' '}{value}{m.group(4) or ''}"
        return text[: m.start()] + line + text[m.end():], True
    tail = "" if text.endswith("\n") or not text else "\n"
    return f"{text}{tail}{key}: {value}\n", True


def accelerate_multi_gpu(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """distributed_type MULTI_GPU and num_processes = the processes wanted, edited line by line."""
    import yaml

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise FixError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise FixError(f"{path}: expected a mapping at the top level")
    notes = []
    out, _ = text, False
    kind = data.get("distributed_type")  # YAML 1.1 reads a bare NO as false
    if kind in (None, False, "") or str(kind).upper() == "NO":
        out, _ = _set_yaml(out, "distributed_type", "MULTI_GPU")
    nproc = facts.get("world_size") or facts.get("nproc")
    if nproc:
        out, _ = _set_yaml(out, "num_processes", str(int(nproc)))
    elif int(data.get("num_processes") or 1) <= 1:
        notes.append("num_processes is still 1: give --param nproc=N (the GPUs per machine) to set it")
    if str(data.get("use_cpu", "false")).lower() == "true":
        out, _ = _set_yaml(out, "use_cpu", "false")
    if out == text:
        raise NotApplicable(f"{path}: already asks for several processes")
    try:
        yaml.safe_load(out)
    except yaml.YAMLError:
        raise FixError(f"internal: editing {path} broke its YAML") from None
    return out, notes


def ds_zero_stage(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    from gpudoctor.engine.fixes.ds_zero import ds_zero_stage as step  # it builds on this module's helpers

    return step(text, path, facts)


def accelerate_fsdp_strategy(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    from gpudoctor.engine.fixes.fsdp_config import accelerate_fsdp_strategy as edit  # D13's strategies live there

    return edit(text, path, facts)


CONFIG_EDITS = {
    "ds-auto": ds_auto,
    "ds-drop-global-batch": ds_drop_global_batch,
    "ds-keep-global-batch": ds_keep_global_batch,
    "accelerate-multi-gpu": accelerate_multi_gpu,
    "ds-zero-stage": ds_zero_stage,
    "accelerate-fsdp-strategy": accelerate_fsdp_strategy,
}
