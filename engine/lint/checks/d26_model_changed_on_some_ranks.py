"""D26: the model is built or reshaped in code only some ranks run, or has lazy layers, when DDP wraps it."""
from __future__ import annotations

import ast
import re

from gpudoctor.engine.lint.model import Check, Hit

# calls that add parameters to a module or change their shapes
RESHAPERS = ("resize_token_embeddings", "add_module", "register_module", "register_parameter", "add_adapter")
# torch.nn layers with parameters, as an attribute assignment's value (model.fc = nn.Linear(...))
LAYERS = re.compile(r"^(?:Linear|Bilinear|Conv[123]d|ConvTranspose[123]d|Embedding|EmbeddingBag|LSTM|GRU|RNN|"
                    r"LayerNorm|GroupNorm|BatchNorm[123]d|Sequential|ModuleList|ModuleDict|MultiheadAttention)$")
LAZY = re.compile(r"^Lazy[A-Z]\w*$")
WRAPPERS = ("DistributedDataParallel", "DDP")


class ModelChangedOnSomeRanks(Check):
    code = "D26"
    slug = "model-changed-on-some-ranks"
    severity = "error"
    summary = "layers added or resized inside `if rank == 0:` (or lazy layers) before DDP: it refuses the model"

    def find(self, script):
        wraps = [s for s in script.calls if s.attr in WRAPPERS]
        if not wraps:
            return
        attribute_values = {id(node.value) for node in script.index.of(ast.Assign)
                            if any(isinstance(t, ast.Attribute) for t in node.targets)}
        for site in script.calls:
            reshapes = site.attr in RESHAPERS or (
                id(site.node) in attribute_values and site.attr is not None and LAYERS.match(site.attr))
            if reshapes and site.gate is not None and site.gate.branch != "caller":
                what = f"{site.attr}()" if site.attr in RESHAPERS else f"a new {site.attr} layer"
                yield Hit(site.line, site.node.col_offset,
                          f"{what} changes the model only where `{site.gate.reason}` holds (line "
                          f"{site.gate.node.lineno}); the other ranks keep the old shapes and DDP stops with \"DDP "
                          "expects same model across all ranks\": change the model on every rank, then wrap it")
        lazy = next((s for s in script.calls if s.attr and LAZY.match(s.attr)), None)
        if lazy is not None and not _forward_before_wrap(script, lazy, wraps[0]):
            yield Hit(lazy.line, lazy.node.col_offset,
                      f"{lazy.attr} has no parameter shapes until its first forward pass, and DDP refuses modules with "
                      f"uninitialized parameters (wrapped at line {wraps[0].line}): run one forward pass on a sample "
                      "batch before wrapping", severity="warning")


def _forward_before_wrap(script, lazy, wrap) -> bool:
    """The model DDP wraps is called once between the lazy layer's creation and the wrap (the dummy forward pass that
    gives lazy layers their shapes, as D26's fix says)."""
    if not wrap.node.args or isinstance(wrap.node.args[0], ast.Call):
        return False  # DDP(Net()): a forward on any other Net() leaves the wrapped instance lazy
    model = ast.unparse(wrap.node.args[0])
    return any(lazy.line < site.line < wrap.line and ast.unparse(site.node.func) == model for site in script.calls)
