"""D4: a port the script fixes becomes a default a job can override.

- `os.environ["MASTER_PORT"] = "29500"` becomes `os.environ.setdefault("MASTER_PORT", "29500")`;
- `os.environ.update(..., MASTER_PORT="29500")` loses the port, which a `setdefault` after it sets instead;
- `init_process_group(init_method="tcp://host:23456")` reads the port from MASTER_PORT, 23456 its default.
A job started with its own MASTER_PORT (or under torchrun, which sets it) then keeps that one."""
from __future__ import annotations

import libcst as cst

from gpudoctor.engine.fixes import cst as h
from gpudoctor.engine.fixes.errors import NotApplicable


def master_port_setdefault(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    from gpudoctor.engine.lint.checks import d4_fixed_master_port as d4
    from gpudoctor.engine.lint.script import Script

    try:
        script = Script(text, path)
        assigns = {node.lineno for node in d4.fixed_port_assignments(script)}
        updates = {node.lineno for node in d4.fixed_port_updates(script)}
        urls = {kw.value.lineno: port for kw, port in d4.fixed_init_method_ports(script)}
    except SyntaxError as exc:
        raise NotApplicable(f"{path}: not valid Python (line {exc.lineno})") from None
    if not (assigns or updates or urls):
        raise NotApplicable(f"{path}: no os.environ[\"MASTER_PORT\"] = <number>, os.environ.update(MASTER_PORT=...) "
                            "or init_method=\"tcp://host:<number>\" to turn into a default")
    from libcst.metadata import MetadataWrapper, PositionProvider

    wrapper = MetadataWrapper(h.parse(text, path))
    positions = wrapper.resolve(PositionProvider)
    skipped: list[str] = []

    class _T(cst.CSTTransformer):
        def leave_SimpleStatementLine(self, original, updated):
            body, after = [], []
            for small, old in zip(updated.body, original.body):
                line = positions[old].start.line
                if (isinstance(small, cst.Assign) and line in assigns and len(small.targets) == 1
                        and isinstance(small.targets[0].target, cst.Subscript)):
                    target = small.targets[0].target
                    key = target.slice[0].slice.value
                    small = cst.Expr(_setdefault(target.value, key, small.value))
                elif line in updates and isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                    kept, port = _without_port(small.value)
                    if port is not None:
                        env = small.value.func.value
                        setdefault = cst.Expr(_setdefault(env, cst.SimpleString('"MASTER_PORT"'), port))
                        if kept is None:
                            small = setdefault
                        elif len(updated.body) == 1:  # the port's own line under the update
                            small = small.with_changes(value=kept)
                            after.append(cst.SimpleStatementLine(body=[setdefault]))
                        else:
                            body.append(small.with_changes(value=kept))
                            small = setdefault
                body.append(small)
            line = updated.with_changes(body=body)
            return cst.FlattenSentinel([line, *after]) if after else line

        def leave_Arg(self, original, updated):
            if not (updated.keyword and updated.keyword.value == "init_method"):
                return updated
            port = urls.get(positions[original.value].start.line)
            if port is None:
                return updated
            url = _url_from_env(updated.value, port)
            if url is None:
                skipped.append(f"init_method on line {positions[original.value].start.line}: read the port from "
                               f"MASTER_PORT by hand (os.environ.get(\"MASTER_PORT\", \"{port}\"))")
                return updated
            return updated.with_changes(value=url)

    module = wrapper.module.visit(_T())
    if urls and len(skipped) < len(urls):
        module = h.add_import(module, "import os", "os")
    return module.code, ["start a second job on the node with its own port: MASTER_PORT=29501 python ..., or under "
                         "torchrun --master-port (or --rdzv-endpoint=localhost:0 to let it pick)", *skipped]


def _setdefault(env: cst.BaseExpression, key: cst.BaseExpression, value: cst.BaseExpression) -> cst.Call:
    return cst.Call(func=cst.Attribute(value=env, attr=cst.Name("setdefault")), args=[cst.Arg(key), cst.Arg(value)])


def _without_port(call: cst.Call) -> tuple[cst.Call | None, cst.BaseExpression | None]:
    """The update() call without its MASTER_PORT (None when nothing else is left), and the port's value."""
    args = list(call.args)
    for i, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == "MASTER_PORT":
            rest = args[:i] + args[i + 1:]
            return (_trimmed(call, rest) if rest else None), arg.value
    if args and isinstance(args[0].value, cst.Dict):
        elements = list(args[0].value.elements)
        for i, el in enumerate(elements):
            if isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString) \
                    and el.key.evaluated_value == "MASTER_PORT":
                rest = elements[:i] + elements[i + 1:]
                if not rest:
                    return (_trimmed(call, args[1:]) if len(args) > 1 else None), el.value
                if rest:
                    rest[-1] = rest[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                new_dict = args[0].value.with_changes(elements=rest)
                return call.with_changes(args=[args[0].with_changes(value=new_dict), *args[1:]]), el.value
    return call, None


def _trimmed(call: cst.Call, args: list[cst.Arg]) -> cst.Call:
    args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=args)


def _url_from_env(value: cst.BaseExpression, port: str) -> cst.BaseExpression | None:
    """`"tcp://h:23456"` or `f"tcp://{h}:23456"` as an f-string whose port comes from MASTER_PORT, or None."""
    source = h.code(value)
    quote = source.lstrip("fFrR")[:1]
    if quote not in ("'", '"') or source.lstrip("fFrR")[:3] in ("'''", '"""') or not source.endswith(f":{port}{quote}"):
        return None
    inner = "'" if quote == '"' else '"'
    head = source[:-len(f"{port}{quote}")]
    if not head.lower().startswith("f"):
        head = "f" + head.replace("{", "{{").replace("}", "}}")
    return h.expr(f"{head}{{os.environ.get({inner}MASTER_PORT{inner}, {inner}{port}{inner})}}{quote}")
