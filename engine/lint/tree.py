"""One pass over a syntax tree: every node by type, and for each statement the calls and strings it holds itself."""
from __future__ import annotations

import ast

_CTX = (ast.Load, ast.Store, ast.Del)
_TRY = tuple(t for t in (ast.Try, getattr(ast, "TryStar", None)) if t is not None)
# compound statement -> (fields evaluated where the statement stands, fields holding nested statements)
COMPOUND = {
    ast.If: (("test",), ("body", "orelse")),
    ast.While: (("test",), ("body", "orelse")),
    ast.For: (("target", "iter"), ("body", "orelse")),
    ast.AsyncFor: (("target", "iter"), ("body", "orelse")),
    ast.With: (("items",), ("body",)),
    ast.AsyncWith: (("items",), ("body",)),
    ast.FunctionDef: (("decorator_list", "args", "returns"), ("body",)),
    ast.AsyncFunctionDef: (("decorator_list", "args", "returns"), ("body",)),
    ast.ClassDef: (("bases", "keywords", "decorator_list"), ("body",)),
    ast.Match: (("subject",), ()),
    **{t: ((), ("body", "orelse", "finalbody")) for t in _TRY},
}
OWN_ATTR = "_gd_own"  # per statement: Call, JoinedStr and str Constant nodes of its own expressions, in order
KEPT = (ast.Name, ast.Attribute, ast.keyword, ast.Import, ast.ImportFrom, ast.ClassDef, ast.Assign, ast.AnnAssign,
        ast.FunctionDef, ast.AsyncFunctionDef, ast.Call, ast.For, ast.IfExp)  # the node types anyone asks for by type
_SCALAR_FIELDS = {"ctx", "id", "attr", "arg", "kind", "type_comment", "level", "module", "is_async", "conversion",
                  "simple", "name", "names", "asname"}


def _node_classes() -> dict[type, tuple[str, ...]]:
    """Every concrete node class -> the fields that can hold child nodes (expression contexts left out)."""
    out, todo = {}, [ast.AST]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls._fields or cls is not ast.AST:
            fields = tuple(f for f in cls._fields if f not in _SCALAR_FIELDS)
            out[cls] = () if cls is ast.Constant else fields
    for ctx in _CTX:
        out.pop(ctx, None)
    return out


_CHILD_FIELDS = _node_classes()


class TreeIndex:
    """Nodes of one module grouped by type; each statement gets OWN_ATTR."""

    def __init__(self, tree: ast.Module):
        self.by_type: dict[type, list[ast.AST]] = {t: [] for t in KEPT}
        self._block(tree.body)

    def of(self, *types: type) -> list[ast.AST]:
        if len(types) == 1:
            return self.by_type[types[0]]
        return [n for t in types for n in self.by_type[t]]

    def _block(self, stmts) -> None:
        for stmt in stmts:
            spec = COMPOUND.get(stmt.__class__)
            own: list[ast.AST] = []
            if spec is None:
                self._walk([stmt], own)
            else:
                heads, bodies = spec
                if stmt.__class__ in self.by_type:
                    self.by_type[stmt.__class__].append(stmt)
                roots = []
                for name in heads:
                    value = getattr(stmt, name, None)
                    if isinstance(value, list):
                        roots.extend(value)
                    elif value is not None:
                        roots.append(value)
                if isinstance(stmt, _TRY):
                    for handler in stmt.handlers:
                        if handler.type is not None:
                            roots.append(handler.type)
                        self._block(handler.body)
                elif isinstance(stmt, ast.Match):
                    for case in stmt.cases:
                        roots.append(case.pattern)
                        if case.guard is not None:
                            roots.append(case.guard)
                        self._block(case.body)
                self._walk(roots, own)
                for name in bodies:
                    self._block(getattr(stmt, name))
            if len(own) > 1:
                own.sort(key=lambda n: (n.lineno, n.col_offset))
            setattr(stmt, OWN_ATTR, own)

    def _walk(self, roots, own: list) -> None:
        by_type, children = self.by_type, _CHILD_FIELDS
        stack = list(roots)
        push = stack.append
        call, joined, const = ast.Call, ast.JoinedStr, ast.Constant
        while stack:
            node = stack.pop()
            cls = node.__class__
            kept = by_type.get(cls)
            if kept is not None:
                kept.append(node)
            if cls is call or cls is joined or (cls is const and node.value.__class__ is str):
                own.append(node)
            for name in children[cls]:
                value = getattr(node, name, None)
                if value.__class__ is list:
                    for item in value:
                        if item.__class__ in children:
                            push(item)
                elif value.__class__ in children:
                    push(value)
