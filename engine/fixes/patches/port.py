"""D4: `os.environ["MASTER_PORT"] = "29500"` becomes `os.environ.setdefault("MASTER_PORT", "29500")`: the number stays
the default, and a job started with its own MASTER_PORT (or under torchrun, which sets it) keeps that one."""
from __future__ import annotations

import libcst as cst

from gpudoctor.engine.fixes import cst as h
from gpudoctor.engine.fixes.errors import NotApplicable


def master_port_setdefault(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    from gpudoctor.engine.lint.checks.d4_fixed_master_port import fixed_port_assignments
    from gpudoctor.engine.lint.script import Script

    try:
        lines = {node.lineno for node in fixed_port_assignments(Script(text, path))}
    except SyntaxError as exc:
        raise NotApplicable(f"{path}: not valid Python (line {exc.lineno})") from None
    if not lines:
        raise NotApplicable(f"{path}: no os.environ[\"MASTER_PORT\"] = <number> to turn into a default")
    from libcst.metadata import MetadataWrapper, PositionProvider

    wrapper = MetadataWrapper(h.parse(text, path))
    positions = wrapper.resolve(PositionProvider)

    class _T(cst.CSTTransformer):
        def leave_SimpleStatementLine(self, original, updated):
            body = []
            for small, old in zip(updated.body, original.body):
                if (isinstance(small, cst.Assign) and positions[old].start.line in lines and len(small.targets) == 1
                        and isinstance(small.targets[0].target, cst.Subscript)):
                    target = small.targets[0].target
                    key = target.slice[0].slice.value
                    call = cst.Call(func=cst.Attribute(value=target.value, attr=cst.Name("setdefault")),
                                    args=[cst.Arg(key), cst.Arg(small.value)])
                    small = cst.Expr(call)
                body.append(small)
            return updated.with_changes(body=body)

    new = wrapper.module.visit(_T())
    return new.code, ["start a second job on the node with its own port: MASTER_PORT=29501 python ..., or under "
                      "torchrun --master-port (or --rdzv-endpoint=localhost:0 to let it pick)"]
