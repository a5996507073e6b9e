"""The published numbers of ShoViR and ModaLens as data, and an audit that checks each one.

* :func:`load_values` — every published value of a paper (``{id: Reported}``), with the
  location where the paper prints it;
* :func:`published` / :func:`published_value` — look values up by keys, for the
  "paper vs this run" columns of the protocol chapters;
* :func:`audit` — recompute every derivable number from its stated components and
  compare within rounding tolerance (one row per check, ``passed`` or ``flagged``).
"""
from .audit import (AUDIT_COLUMNS, DISPLAY_COLUMNS, KINDS, Check, audit, audit_glue_values, audit_summary,
                    audit_table, checks_of, engine_sha256, run_check)
from .expression import Evaluation, ExpressionError, evaluate
from .published import published, published_value
from .values import PAPERS, PaperDataError, Reported, data_files, data_sha256, load_values

__all__ = [
    "PAPERS", "Reported", "PaperDataError", "load_values", "data_files", "data_sha256",
    "published", "published_value", "Check", "KINDS", "AUDIT_COLUMNS", "DISPLAY_COLUMNS", "checks_of", "run_check",
    "audit", "audit_summary", "audit_table", "audit_glue_values", "engine_sha256", "evaluate", "Evaluation", "ExpressionError",
]
