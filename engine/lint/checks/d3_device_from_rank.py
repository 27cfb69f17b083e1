"""D3: the GPU is picked with the global rank (set_device(RANK), cuda:{rank}) or hard-coded to cuda:0; in a launch
script, a literal --local_rank N handed to every worker by torchrun or torch.distributed.launch --use_env."""
from __future__ import annotations

import ast

from gpudoctor.engine.lint.model import Check, Hit
from gpudoctor.engine.lint.ranks import _env_key, last_name, pins_visible_devices

GLOBAL_ENV = {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}
GLOBAL_NAMES = {"global_rank", "world_rank", "grank"}
DEVICE_CALLS = {"set_device", "device", "to", "cuda"}


class DeviceFromGlobalRank(Check):
    code = "D3"
    slug = "device-from-global-rank"
    severity = "error"
    summary = "set_device(RANK), cuda:{rank} or cuda:0 puts processes of other nodes or ranks on the wrong GPU"
    languages = ("python", "shell")

    def find(self, script):
        if not hasattr(script, "calls"):  # a launch script: its commands, read as `lint --cmd` reads one
            yield from _launch_lines(script.text)
            return
        global_names = _global_names(script)
        global_attrs = _global_attributes(script)
        local = {(getattr(v, "_gd_scope", None), t) for targets, v in script.assigns for t in targets}

        def is_global(node, func=None) -> bool:
            if isinstance(node, ast.Name):
                name = node.id
                if name in GLOBAL_NAMES or (func, name) in global_names:
                    return True
                # a module-level global rank, unless the function has its own variable or parameter of that name
                return (None, name) in global_names and func is not None and (func, name) not in local and \
                    name not in {a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)}
            if isinstance(node, ast.Attribute):
                return node.attr in GLOBAL_NAMES or (node.attr == "rank" and last_name(node.value) in ("args", "opt")) \
                    or (node.attr in global_attrs and isinstance(node.value, ast.Name) and node.value.id == "self")
            if isinstance(node, ast.BinOp):  # "cuda:" + str(rank), "cuda:%d" % rank
                left = node.left
                if isinstance(left, ast.Constant) and isinstance(left.value, str) and "cuda:" in left.value:
                    return is_global(node.right, func)
                return False
            if isinstance(node, ast.Call):
                if _env_key(node) in GLOBAL_ENV or last_name(node.func) in ("get_rank", "get_global_rank"):
                    return not node.args and not node.keywords or last_name(node.func) != "get_rank"
                if isinstance(node.func, ast.Attribute) and node.func.attr == "format" and node.args and isinstance(
                        node.func.value, ast.Constant) and "cuda:" in str(node.func.value.value):
                    return is_global(node.args[0], func)  # "cuda:{}".format(rank)
                return last_name(node.func) in ("int", "str") and bool(node.args) and is_global(node.args[0], func)
            if isinstance(node, ast.Subscript):
                return _env_key(node) in GLOBAL_ENV
            return False

        seen = set()
        pinned = pins_visible_devices(script.text)  # each process sees one GPU, as cuda:0
        for site in script.calls:
            for value in _device_args(site):
                key = (value.lineno, value.col_offset)
                if key in seen:
                    continue
                if is_global(value, site.func):
                    seen.add(key)
                    yield Hit(value.lineno, value.col_offset,
                              f"{ast.unparse(value)} is the global rank: on a second node it names a GPU that does "
                              "not exist, and ranks share GPUs; use LOCAL_RANK", "error")
                elif script.multiprocess and site.gate is None and _is_gpu_zero(value, site) and not pinned:
                    seen.add(key)
                    yield Hit(value.lineno, value.col_offset,
                              f"{ast.unparse(value)} hard-codes GPU 0 in a multi-process script: every rank "
                              "lands on the same GPU; use the device from LOCAL_RANK", "warning")
        for s in script.strings:
            node = s.node
            if not isinstance(node, ast.JoinedStr):
                continue
            for i, part in enumerate(node.values[:-1]):
                nxt = node.values[i + 1]
                if isinstance(part, ast.Constant) and str(part.value).endswith("cuda:") and \
                        isinstance(nxt, ast.FormattedValue) and is_global(nxt.value, s.func):
                    key = (node.lineno, node.col_offset)
                    if key not in seen:
                        seen.add(key)
                        yield Hit(node.lineno, node.col_offset,
                                  f"cuda:{{{ast.unparse(nxt.value)}}} uses the global rank as a GPU index; "
                                  "on a second node it names a GPU that does not exist; use LOCAL_RANK", "error")


def _global_names(script) -> set[tuple]:
    """(scope, name) pairs: names a function (or the module, scope None) assigns from the global rank."""
    names: set[tuple] = set()
    for _ in range(2):
        for targets, value in script.assigns:
            scope = getattr(value, "_gd_scope", None)
            v = value
            while isinstance(v, ast.Call) and last_name(v.func) in ("int",) and v.args:
                v = v.args[0]
            if (_env_key(v) in GLOBAL_ENV) or (isinstance(v, ast.Call) and last_name(v.func) == "get_rank"
                                               and not v.args and not v.keywords) or \
                    (isinstance(v, ast.Name) and ((scope, v.id) in names or v.id in GLOBAL_NAMES)) or \
                    (isinstance(v, ast.Attribute) and v.attr == "rank" and last_name(v.value) in ("args", "opt")):
                names.update((scope, t) for t in targets if t.isidentifier())
    return names


def _global_attributes(script) -> set[str]:
    """Attribute names a method sets from the global rank (`self.rank = dist.get_rank()`), read back as self.rank."""
    out = set()
    for node in ast.walk(script.tree):
        if not isinstance(node, ast.Assign):
            continue
        v = node.value
        while isinstance(v, ast.Call) and last_name(v.func) == "int" and v.args:
            v = v.args[0]
        if _env_key(v) in GLOBAL_ENV or (isinstance(v, ast.Call) and last_name(v.func) == "get_rank"
                                         and not v.args and not v.keywords):
            out.update(t.attr for t in node.targets if isinstance(t, ast.Attribute)
                       and isinstance(t.value, ast.Name) and t.value.id == "self")
    return out


def _device_args(site):
    """Expressions a call uses as a CUDA device index."""
    call = site.node
    attr = site.attr
    if attr == "set_device" and call.args:
        yield call.args[0]
    elif attr == "device" and site.name and site.name.startswith("torch") and len(call.args) == 2 and \
            isinstance(call.args[0], ast.Constant) and call.args[0].value == "cuda":
        yield call.args[1]
    elif attr in ("to", "cuda") and isinstance(call.func, ast.Attribute) and call.args:
        yield call.args[0]
    for kw in call.keywords:
        if kw.arg == "device_ids" and isinstance(kw.value, (ast.List, ast.Tuple)) and len(kw.value.elts) == 1:
            yield kw.value.elts[0]
        elif kw.arg in ("output_device", "map_location", "device"):
            yield kw.value
    if attr == "device" and call.args and (isinstance(call.args[0], ast.Constant) or (
            len(call.args) == 1 and site.name and site.name.startswith("torch"))):
        yield call.args[0]  # torch.device("cuda:0"), torch.device("cuda:" + str(rank))


def _is_gpu_zero(node, site) -> bool:
    if isinstance(node, ast.Constant):
        if node.value == "cuda:0":
            return True
        return type(node.value) is int and node.value == 0 and site.attr in ("set_device", "cuda", "to", "device",
                                                                                "DistributedDataParallel", "DDP")
    return False


def _launch_lines(text: str):
    from gpudoctor.engine.fixes.errors import FixError
    from gpudoctor.engine.fixes.launch import parse_launch
    from gpudoctor.engine.lint.command import literal_local_rank_message
    from gpudoctor.engine.lint.sbatch import commands

    lines = text.splitlines()
    for command in commands(text):
        if command.launcher() not in ("torchrun", "torch.distributed.run", "torch.distributed.launch"):
            continue
        try:
            message = literal_local_rank_message(parse_launch(command.code))
        except FixError:
            continue
        if message:
            line, col = command.column(lines, "--local")
            yield Hit(line, col, message, slug="literal-local-rank")
