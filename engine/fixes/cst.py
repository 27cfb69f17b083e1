"""Shared libcst helpers for code patches: parse, name calls, spot rank-0 tests and collectives, add imports."""
from __future__ import annotations

import ast
from typing import Callable

import libcst as cst
import libcst.matchers as m

from gpudoctor.engine.fixes.errors import FixError, NotApplicable

# torch.distributed collectives, and the library calls known to issue one
COLLECTIVES = {
    "all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor", "reduce", "reduce_scatter",
    "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "barrier", "monitored_barrier", "gather",
    "gather_object", "scatter", "scatter_object_list", "all_to_all", "all_to_all_single",
    "wait_for_everyone", "save_checkpoint",
}
_DIST_MODULES = ("dist", "torch.distributed", "distributed")
RANK_NAMES = {"rank", "global_rank", "world_rank", "local_rank", "node_rank", "gpu", "gpu_id", "proc_id"}
MAIN_FLAGS = {"is_main", "is_master", "is_main_process", "is_local_main_process", "is_global_zero",
              "is_world_process_zero", "main_process", "master_process", "is_rank_zero", "is_rank0",
              "master", "_master", "_is_master", "_is_main", "is_main_rank", "is_chief", "is_leader"}


def require_ddp(text: str, path: str, why: str = "") -> None:
    """NotApplicable unless the script wraps a model in DistributedDataParallel (by either name)."""
    if "DistributedDataParallel" not in text and "DDP(" not in text:
        raise NotApplicable(f"{path}: not a DDP script{why}")


def parse(text: str, path: str) -> cst.Module:
    try:
        return cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        raise FixError(f"{path}: not valid Python (line {exc.raw_line}: {exc.message})") from None


def dotted(node: cst.CSTNode) -> str:
    """`a.b.c` for a name or attribute chain, "" for anything else."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else ""
    return ""


def calls(node: cst.CSTNode) -> list[cst.Call]:
    return list(m.findall(node, m.Call()))


def call_name(call: cst.Call) -> str:
    return dotted(call.func)


def last(name: str) -> str:
    return name.rsplit(".", 1)[-1]


_PLAIN_MODULES = {"torch", "os", "np", "numpy", "json", "pickle", "shutil", "math", "time", "sys", "dist",
                  "torch.distributed", "logging", "logger", "log", "re", "random", "yaml"}


def is_collective_call(call: cst.Call, helpers: set[str] = frozenset()) -> bool:
    """A torch.distributed collective, a library call that issues one, a DDP forward, or a helper that does."""
    name = call_name(call)
    if not name:
        return False
    tail = last(name)
    head = name.rsplit(".", 1)[0] if "." in name else ""
    if name in helpers:
        return True
    if head and tail in helpers and head.split(".")[0] not in _PLAIN_MODULES:
        return True  # self._save(...), self.checkpointer.save(...): a method of this file that issues one
    arg = kwarg(call, "sync_dist")
    if arg is not None and code(arg.value) == "True":
        return True  # Lightning's self.log(..., sync_dist=True) reduces across ranks
    if tail in ("gather", "reduce") and not head:
        return False  # a bare gather()/reduce() is more often the user's own function
    if tail in ("save_checkpoint", "wait_for_everyone", "save_state"):
        return True
    if head.endswith("accelerator") and tail in ("gather", "reduce", "gather_for_metrics", "pad_across_processes"):
        return True
    return tail in COLLECTIVES and (head in _DIST_MODULES or head.endswith("distributed") or head == "")


_WRAPPERS = ("DDP", "DistributedDataParallel", "FSDP", "FullyShardedDataParallel")


def collective_helpers(module: cst.Module) -> set[str]:
    """Callables of this file that issue a collective: DDP/FSDP models (their forward), an FSDP model's
    state_dict, a torchmetrics metric's compute, and functions or methods that call any of these."""
    found: set[str] = set()
    for assign in m.findall(module, m.Assign()):
        value = assign.value
        if isinstance(value, cst.Call) and last(call_name(value)) in _WRAPPERS:
            for target in assign.targets:
                name = dotted(target.target)
                if name:
                    found.add(name)
                    if last(call_name(value)) in ("FSDP", "FullyShardedDataParallel"):
                        found.add(f"{name}.state_dict")
    if "torchmetrics" in imported_modules(module):
        found |= {f"{dotted(c.func.value)}.compute" for c in calls(module)
                  if isinstance(c.func, cst.Attribute) and c.func.attr.value == "compute" and dotted(c.func.value)}
    bodies = {f.name.value: f for f in m.findall(module, m.FunctionDef())}
    changed = True
    while changed:
        changed = False
        for name, func in bodies.items():
            if name not in found and any(is_collective_call(c, found) for c in calls(func.body)):
                found.add(name)
                changed = True
    return found


def imported_modules(module: cst.Module) -> set[str]:
    names = set()
    for imp in m.findall(module, m.Import()):
        names |= {dotted(a.name).split(".")[0] for a in imp.names}
    for imp in m.findall(module, m.ImportFrom()):
        if imp.module is not None:
            names.add(dotted(imp.module).split(".")[0])
    return names


def and_parts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The operands of an `a and b and c` chain (one item for anything else)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return and_parts(test.left) + and_parts(test.right)
    return [test]


def is_rank0_test(test: cst.BaseExpression) -> bool:
    """`rank == 0`, `dist.get_rank() == 0`, `args.local_rank == 0`, `accelerator.is_main_process`, `is_main`,
    or any of them joined to other conditions with `and`."""
    parts = and_parts(test)
    if len(parts) > 1:
        return any(is_rank0_test(p) for p in parts)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        zero = (isinstance(target.comparator, cst.Integer) and target.comparator.value == "0") or (
            isinstance(target.comparator, cst.SimpleString) and target.comparator.evaluated_value == "0")
        if isinstance(target.operator, cst.Equal) and zero:
            return _is_rank_value(test.left)
        # `args.local_rank in [-1, 0]`: rank 0, or a run without a launcher (-1), which is alone anyway
        if isinstance(target.operator, cst.In) and isinstance(target.comparator, (cst.List, cst.Tuple, cst.Set)):
            values = {code(e.value).replace(" ", "") for e in target.comparator.elements}
            return "0" in values and values <= {"0", "-1"} and _is_rank_value(test.left)
    name = dotted(test)
    return bool(name) and last(name) in MAIN_FLAGS


def _is_rank_value(node: cst.BaseExpression) -> bool:
    """`rank`, `args.local_rank`, `dist.get_rank()`, `int(os.environ["RANK"])`, `os.environ.get("LOCAL_RANK")`."""
    if isinstance(node, cst.Call) and last(call_name(node)) == "int" and node.args:
        node = node.args[0].value
    if isinstance(node, cst.Subscript) and last(dotted(node.value)) == "environ" and len(node.slice) == 1:
        key = node.slice[0].slice
        return isinstance(key, cst.Index) and isinstance(key.value, cst.SimpleString) and \
            key.value.evaluated_value in ("RANK", "LOCAL_RANK")
    if isinstance(node, cst.Call):
        name = call_name(node)
        if last(name) == "get" and dotted(node.func).endswith("environ.get") and node.args:
            key = node.args[0].value
            return isinstance(key, cst.SimpleString) and key.evaluated_value in ("RANK", "LOCAL_RANK")
        return last(name) in ("get_rank", "get_local_rank", "get_global_rank")
    return last(dotted(node)) in RANK_NAMES


def dist_alias(module: cst.Module) -> str:
    """How this file names torch.distributed (`dist` after `import torch.distributed as dist`)."""
    for imp in m.findall(module, m.Import()):
        for alias in imp.names:
            if dotted(alias.name) == "torch.distributed" and alias.asname is not None:
                return alias.asname.name.value
    for imp in m.findall(module, m.ImportFrom()):
        if imp.module is not None and dotted(imp.module) == "torch" and not isinstance(imp.names, cst.ImportStar):
            for alias in imp.names:
                if alias.name.value == "distributed":
                    return alias.asname.name.value if alias.asname else "distributed"
    return "torch.distributed"


def nn_alias(module: cst.Module) -> str:
    for imp in m.findall(module, m.Import()):
        for alias in imp.names:
            if dotted(alias.name) == "torch.nn" and alias.asname is not None:
                return alias.asname.name.value
    for imp in m.findall(module, m.ImportFrom()):
        if imp.module is not None and dotted(imp.module) == "torch" and not isinstance(imp.names, cst.ImportStar):
            if any(a.name.value == "nn" and a.asname is None for a in imp.names):
                return "nn"
    return "torch.nn"


def has_import(module: cst.Module, line: str) -> bool:
    wanted = cst.parse_statement(line + "\n")
    return any(s.deep_equals(wanted) for s in module.body)


def imported_names(module: cst.Module) -> set[str]:
    names = set()
    for imp in m.findall(module, m.Import()):
        names |= {(a.asname.name.value if a.asname else dotted(a.name)) for a in imp.names}
    for imp in m.findall(module, m.ImportFrom()):
        if not isinstance(imp.names, cst.ImportStar):
            names |= {(a.asname.name.value if a.asname else a.name.value) for a in imp.names}
    return names


def add_import(module: cst.Module, line: str, provides: str) -> cst.Module:
    """Add a top-level import after the existing ones, unless `provides` is already imported."""
    if provides in imported_names(module):
        return module
    body = list(module.body)
    at = 0
    for i, s in enumerate(body):
        if isinstance(s, cst.SimpleStatementLine) and all(isinstance(x, (cst.Import, cst.ImportFrom)) for x in s.body):
            at = i + 1
        elif i == 0 and m.matches(s, m.SimpleStatementLine(body=[m.Expr(m.SimpleString())])):
            at = 1  # after the module docstring
        elif at:
            break
    return module.with_changes(body=body[:at] + [cst.parse_statement(line + "\n")] + body[at:])


def add_from_import(module: cst.Module, package: str, name: str) -> cst.Module:
    """`name` joins the script's own top-level `from package import ...` line when it has one, else a new line."""
    if name in imported_names(module):
        return module
    body = list(module.body)
    for i, s in enumerate(body):
        imp = s.body[0] if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 else None
        if (isinstance(imp, cst.ImportFrom) and not imp.relative and imp.module is not None
                and dotted(imp.module) == package and not isinstance(imp.names, cst.ImportStar)):
            names = list(imp.names)
            names[-1] = names[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            new = imp.with_changes(names=[*names, cst.ImportAlias(name=cst.Name(name))])
            body[i] = s.with_changes(body=[new])
            return module.with_changes(body=body)
    return add_import(module, f"from {package} import {name}", name)


def stmt(code: str) -> cst.BaseStatement:
    return cst.parse_statement(code if code.endswith("\n") else code + "\n")


def expr(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def comment_line(text: str) -> cst.EmptyLine:
    return cst.EmptyLine(indent=True, whitespace=cst.SimpleWhitespace(""), comment=cst.Comment(text))


class _Variables(cst.CSTVisitor):
    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)  # `x.state_dict`: x is a variable, state_dict is not
        return False


def variable_names(node: cst.CSTNode) -> set[str]:
    """Names used as variables, functions or modules (attribute names left out)."""
    visitor = _Variables()
    node.visit(visitor)
    return visitor.names


def uses_name(node: cst.CSTNode, name: str) -> bool:
    return bool(m.findall(node, m.Name(name)))


def assigns_name(node: cst.CSTNode, name: str) -> bool:
    return bool(m.findall(node, m.AssignTarget(target=m.Name(name)))) or bool(
        m.findall(node, m.Param(name=m.Name(name))))


class Block:
    """Where a statement list sits: its function (None at module level), whether it is that scope's own
    body, and whether it runs inside a rank-0 branch."""

    def __init__(self, scope, direct: bool, gated: bool, originals=()):
        self.scope, self.direct, self.gated = scope, direct, gated
        # the statements as parsed, in step with the list handed over: where they sit (a MetadataWrapper's positions)
        self.originals = tuple(originals)


class BodyRewriter(cst.CSTTransformer):
    """Hands every statement list (module, function, loop, if) to `rewrite(statements, block)`."""

    def __init__(self, rewrite: Callable[[list, Block], list]):
        super().__init__()
        self.rewrite = rewrite
        self.scopes: list = []
        self.gated: list = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.scopes.append(node)
        return True

    def leave_FunctionDef(self, original, updated):
        self.scopes.pop()
        return updated

    def visit_If(self, node: cst.If) -> bool:
        self.gated.append(is_rank0_test(node.test))
        return True

    def leave_If(self, original, updated):
        self.gated.pop()
        return updated

    def leave_IndentedBlock(self, original, updated):
        scope = self.scopes[-1] if self.scopes else None
        block = Block(scope, scope is not None and scope.body is original, any(self.gated), original.body)
        return updated.with_changes(body=self.rewrite(list(updated.body), block))

    def leave_Module(self, original, updated):
        return updated.with_changes(body=self.rewrite(list(updated.body), Block(None, True, False, original.body)))


def rewrite_bodies(module: cst.Module, rewrite: Callable[[list, Block], list]) -> cst.Module:
    return module.visit(BodyRewriter(rewrite))


def code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def ast_expr(node: cst.BaseExpression) -> ast.expr:
    """The same expression as an ast node, for the predicates the lint checks share with the patches."""
    return ast.parse(code(node).strip(), mode="eval").body


def ast_stmts(node: cst.CSTNode) -> list[ast.stmt]:
    """The same statement as ast statements (two for `a; b` on one line), its leading comments left out."""
    if hasattr(node, "leading_lines"):
        node = node.with_changes(leading_lines=())
    return ast.parse(code(node).strip() + "\n").body


def one_per_line(body: list) -> list:
    """Statements with `a; b` lines split into one statement per line (the first keeps the line's comments), so that a
    planner can move or insert between them; other statements are kept as they are."""
    out = []
    for s in body:
        if isinstance(s, cst.SimpleStatementLine) and len(s.body) > 1:
            parts = [cst.SimpleStatementLine(body=[small.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)])
                     for small in s.body]
            parts[0] = parts[0].with_changes(leading_lines=s.leading_lines)
            parts[-1] = parts[-1].with_changes(trailing_whitespace=s.trailing_whitespace)  # its comment
            out += parts
        else:
            out.append(s)
    return out


def indented(s):
    """`if x: a; b` (or a one-line for, while, with) with its body as an indented block, one statement per line."""
    if isinstance(s.body, cst.SimpleStatementSuite):
        s = s.with_changes(body=cst.IndentedBlock(header=s.body.trailing_whitespace,
                                                  body=[cst.SimpleStatementLine(body=s.body.body)]))
    return s.with_changes(body=s.body.with_changes(body=one_per_line(list(s.body.body))))


def flagged_lines(text: str, path: str, code: str) -> set[str]:
    """The source lines (stripped) where lint's `code` check reports a finding: a planner changes only those
    statements, so that it never rewrites what lint found correct (a per-rank file name, a dataset already split)."""
    from gpudoctor.engine.lint import lint_source

    lines = text.splitlines()
    return {lines[f.line - 1].strip() for f in lint_source(text, path, select=[code]).findings
            if f.entry_id == code and 0 < f.line <= len(lines)}


def first_line(s) -> str:
    """A statement's first line of code, stripped, its comments above left out (to compare with flagged_lines)."""
    if hasattr(s, "leading_lines"):
        s = s.with_changes(leading_lines=())
    text = code(s).strip()
    return text.splitlines()[0].strip() if text else ""


# calls that print, log or write something: side effects one rank is enough for
WRITES = {"print", "write", "writelines", "save", "dump", "log", "info", "warning", "debug", "add_scalar",
          "add_scalars", "add_image", "log_dict", "log_metrics", "savefig", "save_pretrained", "open", "makedirs",
          "mkdir", "upload", "push_to_hub"}


def first_write(node) -> str | None:
    """The name of the first call under node that prints, logs or writes (wandb.* counts), else None."""
    return next((name for name in map(call_name, calls(node)) if last(name) in WRITES or name.startswith("wandb.")),
                None)


def ddp_names(module: cst.Module) -> list[str]:
    """The names DDP-wrapped models are assigned to (`model = DDP(...)`, `self.net = DistributedDataParallel(...)`)."""
    names: list[str] = []
    for assign in m.findall(module, m.Assign()):
        if isinstance(assign.value, cst.Call) and last(call_name(assign.value)) in ("DDP", "DistributedDataParallel"):
            names += [n for n in (dotted(t.target) for t in assign.targets) if n and n not in names]
    return names


def define_before_use(module: cst.Module, name: str, definition: str) -> cst.Module:
    """In each scope that reads `name` without defining it, insert `definition` before the first use."""

    def rewrite(stmts, block):
        if not block.direct:
            return stmts
        if block.scope is not None and assigns_name(block.scope.params, name):
            return stmts
        used = [i for i, s in enumerate(stmts)
                if not isinstance(s, (cst.FunctionDef, cst.ClassDef)) and uses_name(s, name)]
        if not used or any(assigns_name(s, name) for s in stmts[: used[0] + 1]
                           if not isinstance(s, (cst.FunctionDef, cst.ClassDef))):
            return stmts
        i = used[0]
        new = stmt(definition).with_changes(leading_lines=stmts[i].leading_lines)
        return stmts[:i] + [new, stmts[i].with_changes(leading_lines=())] + stmts[i + 1:]

    return rewrite_bodies(module, rewrite)


def add_kwarg(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """Append `name=value` to a call, following its one-line or one-argument-per-line layout."""
    eq = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    new = cst.Arg(value=value, keyword=cst.Name(name), equal=eq)
    args = list(call.args)
    if not args:
        return call.with_changes(args=[new])
    lastarg = args[-1]
    if isinstance(lastarg.comma, cst.Comma):  # a trailing comma: one argument per line
        sep = args[-2].comma if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else lastarg.comma
        args[-1] = lastarg.with_changes(comma=sep)
        args.append(new.with_changes(comma=lastarg.comma))
    else:
        args[-1] = lastarg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(new)
    return call.with_changes(args=args)


def kwarg(call: cst.Call, name: str) -> cst.Arg | None:
    for a in call.args:
        if a.keyword is not None and a.keyword.value == name:
            return a
    return None


def replace_calls(node, fn: Callable[[cst.Call], cst.BaseExpression | None]):
    """Rewrite every call in `node` that `fn` answers for (None leaves it)."""

    class _T(cst.CSTTransformer):
        def leave_Call(self, original, updated):
            new = fn(updated)
            return updated if new is None else new

    return node.visit(_T())
