"""One parsed training script: imports, rank branches, every call with its context, a same-file call graph."""
from __future__ import annotations

import ast
from dataclasses import dataclass

from gpudoctor.engine.lint.collectives import collective_of
from gpudoctor.engine.lint.ranks import RankModel, decorator_gates, last_name
from gpudoctor.engine.lint.tree import COMPOUND, OWN_ATTR, TreeIndex

FUNC_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)
TRY_TYPES = tuple(t for t in (ast.Try, getattr(ast, "TryStar", None)) if t is not None)
EXITS = ("exit", "_exit", "quit")
# text that marks a script run as several processes
MULTIPROCESS_MARKERS = ("init_process_group", "DistributedDataParallel", "DistributedSampler", "mp.spawn",
                        "torch.multiprocessing", "LOCAL_RANK", "get_rank", "FullyShardedDataParallel",
                        "fully_shard", "Accelerator(", "deepspeed.initialize", "hvd.init", "xmp.spawn",
                        "init_device_mesh")


@dataclass(frozen=True)
class Gate:
    """Why only some ranks run a piece of code."""

    reason: str  # e.g. "rank == 0", "not (rank == 0)", "@rank_zero_only"
    node: ast.AST  # the If or the decorated function
    branch: str  # body | else | after | decorator | caller


@dataclass
class CallSite:
    node: ast.Call
    name: str | None  # callee's dotted name with import aliases resolved: torch.distributed.barrier
    attr: str | None  # last segment: barrier
    recv: str | None  # the receiver as written: self.accelerator
    func: ast.AST | None  # enclosing function
    cls: str | None  # enclosing class
    gate: Gate | None  # innermost rank gate inside the enclosing function
    loop: bool  # inside a for/while of the enclosing function

    @property
    def recv_last(self) -> str | None:
        return self.recv.rsplit(".", 1)[-1] if self.recv else (
            last_name(self.node.func.value) if isinstance(self.node.func, ast.Attribute) else None)

    @property
    def line(self) -> int:
        return self.node.lineno


@dataclass
class StringSite:
    node: ast.AST  # Constant or JoinedStr
    gate: Gate | None
    func: ast.AST | None


def dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


@dataclass
class _Ctx:
    func: ast.AST | None = None
    cls: str | None = None
    gate: Gate | None = None
    loop: bool = False


class Script:
    """Everything the checks ask about one file, computed in two passes over its tree."""

    def __init__(self, text: str, path: str = "<string>"):
        self.text = text
        self.path = path
        self.tree = ast.parse(text, filename=path)
        self.aliases: dict[str, str] = {}
        self.functions: dict[str, list[ast.AST]] = {}  # plain and nested functions by name
        self.methods: dict[str, list[ast.AST]] = {}  # methods by name, any class
        self.assigns: list[tuple[list[str], ast.AST]] = []  # (target names, value) in source order
        self.calls: list[CallSite] = []
        self.strings: list[StringSite] = []
        self.ifs: list[tuple[ast.If, _Ctx]] = []
        self.loops: list[tuple[ast.AST, _Ctx]] = []
        self._index()
        self.ranks = RankModel(self._spawn_rank_params())
        self._taint()
        self.metric_names, self.fsdp_names, self.syncbn_names = self._wrapped_names()
        self.full_state_dict = "FULL_STATE_DICT" in text or "full_state_dict=True" in text
        self.multiprocess = any(m in text for m in MULTIPROCESS_MARKERS)
        self._visit_block(self.tree.body, _Ctx())
        self._ternary_gates()
        self._calls_in: dict[ast.AST | None, list[CallSite]] = {}
        for site in self.calls:
            self._calls_in.setdefault(site.func, []).append(site)
        self._collective_cache: dict[int, str | None] = {}
        self.gated_only = self._gated_only()

    # --- pass 1: imports, definitions, assignments
    def _index(self) -> None:
        idx = self.index = TreeIndex(self.tree)
        used = self.names_used = {n.id for n in idx.of(ast.Name)}  # identifiers, attributes, keywords (never comments)
        used.update(n.attr for n in idx.of(ast.Attribute))
        used.update(n.arg for n in idx.of(ast.keyword) if n.arg)
        for node in idx.of(ast.Import):
            for a in node.names:
                self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        for node in idx.of(ast.ImportFrom):
            if node.module:
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        for node in idx.of(ast.ClassDef):
            for item in node.body:
                if isinstance(item, FUNC_TYPES):
                    self.methods.setdefault(item.name, []).append(item)
                    item._gd_method = node.name  # type: ignore[attr-defined]
        for node in idx.of(ast.Assign, ast.AnnAssign):
            if node.value is None:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n for t in targets for n in _target_names(t)]
            if names:
                self.assigns.append((names, node.value))
        for node in idx.of(*FUNC_TYPES):
            if not getattr(node, "_gd_method", False):
                self.functions.setdefault(node.name, []).append(node)
        self.assigns.sort(key=lambda a: (a[1].lineno, a[1].col_offset))

    def resolve(self, name: str | None) -> str:
        if not name:
            return ""
        head, _, rest = name.partition(".")
        full = self.aliases.get(head, head)
        return f"{full}.{rest}" if rest else full

    def imports_any(self, *modules: str) -> bool:
        return any(v == m or v.startswith(m + ".") for v in self.aliases.values() for m in modules)

    def _spawn_rank_params(self) -> set[str]:
        """mp.spawn(fn, ...) calls fn(index, ...): fn's first parameter is the process's rank."""
        names = set()
        for node in self.index.of(ast.Call):
            if last_name(node.func) in ("spawn", "start_processes") and node.args:
                target = last_name(node.args[0])
                for fn in self.functions.get(target or "", []):
                    if fn.args.args:
                        names.add(fn.args.args[0].arg)
        return names

    def _taint(self) -> None:
        for _ in range(3):  # is_main = rank == 0; master = is_main and not dry_run
            grew = False
            for names, value in self.assigns:
                if any(n not in self.ranks.names for n in names) and self.ranks.taints(value):
                    self.ranks.names.update(names)
                    grew = True
            if not grew:
                break

    def _has_buffers(self) -> bool:
        return "BatchNorm" in self.text or "register_buffer" in self.text

    def _wrapped_names(self):
        metrics, fsdp, syncbn = set(), set(), set()
        self.ddp_buffer_names: set[str] = set()
        for names, value in self.assigns:
            if not isinstance(value, ast.Call):
                continue
            callee = self.resolve(dotted(value.func))
            tail = last_name(value.func)
            arg0 = last_name(value.args[0]) if value.args else None
            if callee.startswith("torchmetrics"):
                metrics.update(names)
            if tail in ("FullyShardedDataParallel", "FSDP", "fully_shard"):
                fsdp.update(names)
            if tail == "fully_shard" and arg0:
                fsdp.add(arg0)
            if tail == "convert_sync_batchnorm" or (arg0 in syncbn and tail in ("DistributedDataParallel", "DDP")):
                syncbn.update(names)
            elif tail in ("DistributedDataParallel", "DDP") and self._has_buffers() and not any(
                    k.arg == "broadcast_buffers" and isinstance(k.value, ast.Constant) and not k.value.value
                    for k in value.keywords):
                self.ddp_buffer_names.update(names)
        for site_call in self.index.of(ast.Call):
            if last_name(site_call.func) == "fully_shard" and site_call.args:
                name = last_name(site_call.args[0])
                if name:
                    fsdp.add(name)
        return metrics, fsdp, syncbn

    # --- pass 2: statements with their rank gate
    def _visit_block(self, stmts: list[ast.stmt], ctx: _Ctx) -> None:
        for stmt in stmts:
            own = getattr(stmt, OWN_ATTR, ())
            if own:
                self._record(own, ctx)  # the statement's own expressions run in ctx
            if stmt.__class__ in (ast.Assign, ast.AnnAssign) and stmt.value is not None:
                stmt.value._gd_scope = ctx.func  # type: ignore[attr-defined]  # where the assigned name lives
            if stmt.__class__ not in COMPOUND:
                continue
            if isinstance(stmt, FUNC_TYPES):
                stmt._gd_parent = ctx.func  # type: ignore[attr-defined]  # the scope a bare name resolves in
                deco = decorator_gates(stmt)
                gate = Gate(f"@{deco}", stmt, "decorator") if deco else None
                self._visit_block(stmt.body, _Ctx(stmt, ctx.cls, gate, False))
            elif isinstance(stmt, ast.ClassDef):
                self._visit_block(stmt.body, _Ctx(None, stmt.name, None, False))
            elif isinstance(stmt, ast.If):
                self.ifs.append((stmt, ctx))
                if self.ranks.is_rank_test(stmt.test):
                    reason = _short(stmt.test)
                    self._visit_block(stmt.body, _Ctx(ctx.func, ctx.cls, Gate(reason, stmt, "body"), ctx.loop))
                    self._visit_block(stmt.orelse, _Ctx(ctx.func, ctx.cls, Gate(f"not ({reason})", stmt, "else"),
                                                        ctx.loop))
                    if not stmt.orelse and _exits(stmt.body):
                        ctx = _Ctx(ctx.func, ctx.cls, Gate(f"after `if {reason}: return`", stmt, "after"), ctx.loop)
                else:
                    self._visit_block(stmt.body, ctx)
                    self._visit_block(stmt.orelse, ctx)
            elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
                self.loops.append((stmt, ctx))
                self._visit_block(stmt.body, _Ctx(ctx.func, ctx.cls, ctx.gate, True))
                self._visit_block(stmt.orelse, ctx)
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                self._visit_block(stmt.body, ctx)
            elif isinstance(stmt, TRY_TYPES):
                self._visit_block(stmt.body, ctx)
                for h in stmt.handlers:
                    self._visit_block(h.body, ctx)
                self._visit_block(stmt.orelse, ctx)
                self._visit_block(stmt.finalbody, ctx)
            elif isinstance(stmt, ast.Match):
                for case in stmt.cases:
                    self._visit_block(case.body, ctx)

    def _record(self, nodes, ctx: _Ctx) -> None:
        for node in nodes:
            if node.__class__ is ast.Call:
                func = node.func
                name = dotted(func)
                recv = dotted(func.value) if isinstance(func, ast.Attribute) else None
                self.calls.append(CallSite(node, self.resolve(name) if name else None, last_name(func), recv,
                                           ctx.func, ctx.cls, ctx.gate, ctx.loop))
            elif node.__class__ is ast.JoinedStr or node.value.startswith(("cuda", "ddp")):
                self.strings.append(StringSite(node, ctx.gate, ctx.func))

    def _ternary_gates(self) -> None:
        """`dist.all_reduce(x) if rank == 0 else x`: the calls in either arm of a conditional expression on the rank
        are gated as an if statement's would be."""
        ternaries = [n for n in self.index.of(ast.IfExp) if self.ranks.is_rank_test(n.test)]
        if not ternaries:
            return
        arm: dict[int, Gate] = {}
        for node in ternaries:
            reason = _short(node.test)
            for branch, part in (("body", node.body), ("else", node.orelse)):
                gate = Gate(reason if branch == "body" else f"not ({reason})", node, branch)
                for inner in ast.walk(part):
                    if isinstance(inner, ast.Call):
                        arm.setdefault(id(inner), gate)
        for site in self.calls:
            if site.gate is None and id(site.node) in arm:
                site.gate = arm[id(site.node)]

    # --- call graph
    def calls_in(self, func: ast.AST | None) -> list[CallSite]:
        return self._calls_in.get(func, [])

    def targets(self, site: CallSite) -> list[ast.AST]:
        """Same-file functions a call may run: foo() -> def foo, self.foo() -> a method foo."""
        func = site.node.func
        if isinstance(func, ast.Name):
            found = self.functions.get(func.id, [])
            if len(found) < 2:
                return found
            scopes, f = [None], site.func  # Python scoping: the enclosing functions, then the module
            while f is not None:
                scopes.append(f)
                f = getattr(f, "_gd_parent", None)
            return [d for d in found if getattr(d, "_gd_parent", None) in scopes]
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and (
                func.value.id in ("self", "cls") or func.value.id in self.class_names):
            return self.methods.get(func.attr, [])
        if isinstance(func, ast.Attribute) and site.recv and site.recv.split(".", 1)[0] in ("self", "cls"):
            # self.checkpointer.save(): a method of another class of this file (never the caller's own class)
            return [m for m in self.methods.get(func.attr, []) if getattr(m, "_gd_method", None) != site.cls]
        return []

    @property
    def class_names(self) -> set[str]:
        if not hasattr(self, "_class_names"):
            self._class_names = {n.name for n in self.index.of(ast.ClassDef)}
        return self._class_names

    def callers(self, func: ast.AST) -> list[CallSite]:
        if not hasattr(self, "_callers"):
            self._callers: dict[ast.AST, list[CallSite]] = {}
            for site in self.calls:
                for target in self.targets(site):
                    self._callers.setdefault(target, []).append(site)
        return self._callers.get(func, [])

    def _gated_only(self) -> set[ast.AST]:
        """Functions that only rank-gated code calls (or that a gating decorator wraps)."""
        gated = {f for fs in (*self.functions.values(), *self.methods.values()) for f in fs if decorator_gates(f)}
        candidates = [f for fs in (*self.functions.values(), *self.methods.values()) for f in fs]
        for _ in range(4):
            grew = False
            for f in candidates:
                if f in gated:
                    continue
                sites = self.callers(f)
                if sites and all(s.gate is not None or s.func in gated for s in sites if s.func is not f):
                    if any(s.func is not f for s in sites):
                        gated.add(f)
                        grew = True
            if not grew:
                break
        return gated

    def effective_gate(self, site: CallSite) -> Gate | None:
        if site.gate is not None:
            return site.gate
        if site.func is not None and site.func in self.gated_only:
            return Gate(f"{site.func.name}() runs on some ranks only", site.func, "caller")
        return None

    def collective(self, site: CallSite) -> str | None:
        key = id(site.node)
        if key not in self._collective_cache:
            self._collective_cache[key] = collective_of(site, self)
        return self._collective_cache[key]

    def issues(self, func: ast.AST) -> tuple[str, int, str] | None:
        """(collective, line, via) for the first collective a function runs unconditionally, through helpers too."""
        if not hasattr(self, "_issues"):
            self._issues: dict[ast.AST, tuple[str, int, str]] = {}
            funcs = [f for fs in (*self.functions.values(), *self.methods.values()) for f in fs]
            for f in funcs:
                for site in self.calls_in(f):
                    desc = self.collective(site) if site.gate is None else None
                    if desc:
                        self._issues[f] = (desc, site.line, "")
                        break
            for _ in range(6):
                grew = False
                for f in funcs:
                    if f in self._issues:
                        continue
                    for site in self.calls_in(f):
                        if site.gate is not None:
                            continue
                        hit = next((self._issues[t] for t in self.targets(site) if t in self._issues and t is not f),
                                   None)
                        if hit:
                            via = f"{site.attr}()" + (f" -> {hit[2]}" if hit[2] else "")
                            self._issues[f] = (hit[0], hit[1], via)
                            grew = True
                            break
                if not grew:
                    break
        return self._issues.get(func)

    def eval_before(self, name: str, site: CallSite) -> bool:
        return any(s.attr == "eval" and s.recv == name and s.line <= site.line for s in self.calls_in(site.func))

    def mentions(self, *words: str) -> bool:
        """Raw text search, comments included: for phrases that are not single identifiers."""
        return any(w in self.text for w in words)

    def uses(self, *names: str) -> bool:
        """Is any of these identifiers, attributes or keyword arguments used in the code?"""
        return any(n in self.names_used for n in names)


def _target_names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Attribute):
        return [target.attr]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in _target_names(e)]
    return []


def _exits(body: list[ast.stmt]) -> bool:
    last = body[-1] if body else None
    if isinstance(last, (ast.Return, ast.Raise, ast.Continue, ast.Break)):
        return True
    return isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and last_name(last.value.func) in EXITS


def _short(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 50 else text[:47] + "..."
