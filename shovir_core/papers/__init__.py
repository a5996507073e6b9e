"""The published numbers of ShoViR and ModaLens as data, and an audit that checks each one.

* :func:`load_values` — every published value of a paper (``{id: Reported}``), with the
  location where the paper prints it;
* :func:`published` / :func:`published_value` — look values up by keys, for the
  "paper vs this run" columns of the protocol chapters;
* :func:`audit` — recompute every derivable number from its stated components and
  compare within rounding tolerance (one row per check, ``passed`` or ``flagged``); the audit
  chapters' tables are built from its rows by :mod:`shovir_core.tables.audit`.
"""
from .audit import AUDIT_COLUMNS, KINDS, Check, audit, checks_of, engine_sha256, run_check
from .expression import Evaluation, ExpressionError, evaluate
from .published import PaperNumber, equals_published, paper_source, published, published_value
from .values import PAPERS, PaperDataError, Reported, data_files, data_sha256, load_values

__all__ = [
    "PAPERS", "Reported", "PaperDataError", "load_values", "data_files", "data_sha256",
    "published", "published_value", "PaperNumber", "paper_source", "equals_published", "Check", "KINDS", "AUDIT_COLUMNS", "checks_of", "run_check",
    "audit", "engine_sha256", "evaluate", "Evaluation", "ExpressionError",
]
