"""Static checks of training scripts for the catalogue's failure patterns (`gpudoctor lint`)."""
from __future__ import annotations

from gpudoctor.engine.lint.model import LintFinding, LintResult
from gpudoctor.engine.lint.runner import lint_paths, lint_source

__all__ = ["LintFinding", "LintResult", "lint_paths", "lint_source"]
