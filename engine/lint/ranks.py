"""Which expressions hold a rank, and which `if` tests only some ranks pass."""
from __future__ import annotations

import ast
import re

# a variable or attribute that holds this process's rank: rank, local_rank, args.global_rank, ddp_rank
RANK_NAME = re.compile(r"^_*(?:[a-z0-9]+_)*rank(?:_?(?:id|idx|num|index))?$|^(?:local_)?process_index$|^proc_?id$",
                       re.IGNORECASE)
# a flag true on some ranks only: is_main_process, master_process, trainer.is_global_zero, is_rank_zero
MAIN_FLAG = re.compile(
    r"^_*(?:is_|am_)(?:local_|global_|node_)?(?:main|master|primary|leader|chief|rank_?0|rank_?zero|zero|first|last)"
    r"(?:_process|_proc|_rank|_node|_worker|_host|_device|_ordinal)?$"
    r"|^_*(?:local_|global_)?(?:main|master)_(?:process|proc|rank|worker)$"
    r"|^_*rank_?(?:0|zero)$|^_*master$",
    re.IGNORECASE)
# functions whose result is a rank or a main-process flag
RANK_CALLS = frozenset({
    "get_rank", "get_local_rank", "get_global_rank", "get_node_local_rank", "get_ordinal", "get_local_ordinal",
    "get_data_parallel_rank", "get_process_index", "rank", "local_rank", "cross_rank",
})
RANK_ENV = frozenset({"RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "SLURM_PROCID", "SLURM_LOCALID",
                      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMIX_RANK"})
# decorators that run the function on some ranks only
GATING_DECORATORS = frozenset({"rank_zero_only", "on_main_process", "on_local_main_process", "on_process",
                               "on_local_process", "on_last_process", "master_only", "main_process_only",
                               "rank_zero_experiment"})


def last_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return last_name(node.func)
    return None


def _env_key(node: ast.AST) -> str | None:
    """'RANK' for os.environ['RANK'], os.environ.get('RANK', 0), os.getenv('RANK')."""
    if isinstance(node, ast.Subscript) and last_name(node.value) == "environ":
        key = node.slice
    elif isinstance(node, ast.Call) and node.args and (
            last_name(node.func) == "getenv"
            or (last_name(node.func) == "get" and isinstance(node.func, ast.Attribute)
                and last_name(node.func.value) == "environ")):
        key = node.args[0]
    else:
        return None
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None


class RankModel:
    """Rank-valued names of one file (the regexes plus names assigned from a rank expression)."""

    def __init__(self, extra_names: set[str] | None = None):
        self.names: set[str] = set(extra_names or ())

    def is_rank_value(self, node: ast.AST) -> bool:
        """An expression whose value differs between ranks: rank, dist.get_rank(), int(os.environ['RANK']) % 8."""
        if isinstance(node, ast.Name):
            return node.id in self.names or bool(RANK_NAME.match(node.id) or MAIN_FLAG.match(node.id))
        if isinstance(node, ast.Attribute):
            return node.attr in self.names or bool(RANK_NAME.match(node.attr) or MAIN_FLAG.match(node.attr))
        if isinstance(node, ast.Call):
            if _env_key(node) in RANK_ENV:
                return True
            name = last_name(node.func)
            if name in RANK_CALLS or (name and MAIN_FLAG.match(name)):
                return True
            if name in ("int", "bool", "str") and node.args:
                return self.is_rank_value(node.args[0])
            return False
        if isinstance(node, ast.Subscript):
            return _env_key(node) in RANK_ENV
        if isinstance(node, ast.BinOp):
            return self.is_rank_value(node.left) or self.is_rank_value(node.right)
        return False

    def is_rank_test(self, test: ast.AST) -> bool:
        """True when an `if` on this test is taken by some ranks and not others.

        `local_rank != -1` and `rank is not None` ask whether the job is distributed at all (every rank
        gives the same answer), so they are not rank tests; `local_rank in [-1, 0]` is one.
        """
        if isinstance(test, ast.BoolOp):
            return any(self.is_rank_test(v) for v in test.values)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self.is_rank_test(test.operand)
        if isinstance(test, ast.Compare):
            parts = [test.left, *test.comparators]
            ranked = [p for p in parts if self.is_rank_value(p)]
            if not ranked:
                return False
            others = [p for p in parts if not self.is_rank_value(p)]
            return not (others and all(_is_non_distributed_marker(p) for p in others))
        return self.is_rank_value(test)

    def taints(self, value: ast.AST) -> bool:
        """Does assigning this value make the target rank-valued?"""
        if isinstance(value, (ast.Compare, ast.BoolOp, ast.UnaryOp)):
            return self.is_rank_test(value)
        if isinstance(value, ast.IfExp):
            return self.taints(value.body) and self.taints(value.orelse)
        return self.is_rank_value(value)


def _is_non_distributed_marker(node: ast.AST) -> bool:
    """-1 or None (or a tuple of them): the 'not launched distributed' value of a rank variable."""
    if isinstance(node, ast.Constant):
        return node.value is None or node.value == -1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return isinstance(node.operand, ast.Constant) and node.operand.value == 1
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(_is_non_distributed_marker(e) for e in node.elts)
    return False


def decorator_gates(func: ast.AST) -> str | None:
    """The decorator that makes a function run on some ranks only, if any."""
    for deco in getattr(func, "decorator_list", ()):
        name = last_name(deco)
        if name in GATING_DECORATORS:
            return name
    return None


# the script pins one GPU per process itself: os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank), setdefault, update
_PINS_VISIBLE = re.compile(r"""environ\s*(?:\[\s*['"]CUDA_VISIBLE_DEVICES['"]\s*\]\s*=[^=]|"""
                           r"""\.setdefault\(\s*['"]CUDA_VISIBLE_DEVICES['"]|\.update\([^)]{0,200}CUDA_VISIBLE_DEVICES)""")


def pins_visible_devices(text: str) -> bool:
    """Does the script set CUDA_VISIBLE_DEVICES itself? Then each process sees its GPU as cuda:0, and cuda:0 is right."""
    return "CUDA_VISIBLE_DEVICES" in text and bool(_PINS_VISIBLE.search(text))
