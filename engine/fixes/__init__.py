"""Executable fixes: plan an entry's fix actions as diffs, commands and env (pure); apply.py writes them."""
from __future__ import annotations

from gpudoctor.engine.fixes.errors import BrokenResultError, FixError, NotApplicable, StaleFileError
from gpudoctor.engine.fixes.facts import facts_from_diagnosis
from gpudoctor.engine.fixes.model import FileEdit, FixPlan, PlannedFix, plan_to_dict
from gpudoctor.engine.fixes.plan import plan_fix

__all__ = ["BrokenResultError", "FileEdit", "FixError", "FixPlan", "NotApplicable", "PlannedFix", "StaleFileError",
           "facts_from_diagnosis", "plan_fix", "plan_to_dict"]
