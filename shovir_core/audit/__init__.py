"""Audit one model, declared or imported: the records of the ShoViR and ModaLens designs, and a report card.

``audit_runs(model, *, profile, only)``  the records one model's card reads (``params/report_card/<profile>.yaml``)
``make_records(targets, *, progress)``   make (or resume) them; complete ones are reused
``export_inputs(out_dir, *, profile, only)``  the exact model inputs of those records, for a model run elsewhere
``import_answers(path, *, name, export, ...)``  read answers made elsewhere into a declared ``imported`` model
``report_card(model, runs, *, profile)`` the card: ShoViR Δ_FN, Δ_X, FR and ModaLens flip rates beside the papers'
"""
from __future__ import annotations

from .plan import AUDIT_PARAMS, AuditError, audit_parameters, audit_runs, make_records

__all__ = ["AuditError", "AUDIT_PARAMS", "audit_runs", "audit_parameters", "make_records"]
