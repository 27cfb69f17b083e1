"""Frozen dataclasses for catalogue entries: what the loader produces and everything else reads."""
from __future__ import annotations

from dataclasses import dataclass, field

SECTIONS = ("launchers", "ddp", "fsdp", "deepspeed", "hangs", "multinode", "pitfalls", "guides", "user")

SECTION_TITLES = {
    "launchers": "Launchers & env",
    "ddp": "DDP",
    "fsdp": "FSDP",
    "deepspeed": "DeepSpeed",
    "hangs": "Hangs",
    "multinode": "Multi-node NCCL & elastic",
    "pitfalls": "DDP pitfalls",
    "guides": "Guides",
    "user": "Your runbooks",
}


@dataclass(frozen=True)
class FixStep:
    text: str
    code: str | None = None
    lang: str | None = None


@dataclass(frozen=True)
class Related:
    id: str
    why: str


@dataclass(frozen=True)
class Pointer:
    """A topic outside the catalogue, shown as plain text."""

    topic: str
    note: str


@dataclass(frozen=True)
class Reference:
    title: str
    url: str


@dataclass(frozen=True)
class Signature:
    """One log pattern that betrays an entry."""

    id: str
    pattern: str  # a regular expression; literals are escaped on load
    weight: float
    literal: str | None = None  # set when the YAML gave a literal
    needs: tuple[str, ...] = ()
    context: bool = False
    ignore_case: bool = False


@dataclass(frozen=True)
class FixAction:
    id: str
    kind: str  # env | command | patch | config
    safety: str  # safe | unsafe | display-only
    title: str
    params: tuple[tuple[str, object], ...] = ()

    def param(self, name: str, default: object = None) -> object:
        for key, value in self.params:
            if key == name:
                return value
        return default


@dataclass(frozen=True)
class Entry:
    id: str
    title: str
    section: str
    summary: str
    symptoms: tuple[str, ...]
    cause: str
    fix_summary: str
    fix: tuple[FixStep, ...]
    log_visibility: str
    log_visibility_note: str = ""
    error_strings: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    signatures: tuple[Signature, ...] = ()
    probes: tuple[str, ...] = ()
    fix_actions: tuple[FixAction, ...] = ()
    related: tuple[Related, ...] = ()
    see_also: tuple[Pointer, ...] = ()
    references: tuple[Reference, ...] = ()
    source: str = ""  # the file it came from, as shown in messages
    origin: str = "builtin"  # builtin | user
    extra: tuple[tuple[str, object], ...] = field(default=(), compare=False)
