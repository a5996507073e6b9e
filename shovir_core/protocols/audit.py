"""The ``audit`` protocol: check a paper's published numbers, one trial row per check.

The audit is pure arithmetic on the data files shipped in :mod:`shovir_core.papers`;
running it as a protocol puts its result in a run record like every other number
of the book, so the audit chapters read records only. The resolved spec carries
the SHA-256 of the paper's data files and of the audit's source, so a change of
either makes a new record.

Spec (:data:`SPEC`)
-------------------
``paper``: ``"shovir"`` or ``"modalens"`` (required).
"""
from __future__ import annotations

from .. import papers
from ..papers.audit import load_checks
from ..records import Run, RunWriter, load_run, spec_hash
from .spec import Field, REQUIRED, SpecSchema, StaleSpecError

__all__ = ["SPEC", "resolve_spec", "execute"]

PROTOCOL = "audit"

SPEC = SpecSchema(PROTOCOL, [
    Field("paper", str, REQUIRED, choices=tuple(sorted(papers.PAPERS)), doc="the paper whose numbers are checked"),
    # pinned by resolve_spec (a spec may carry them; a mismatch is an error)
    Field("data_sha256", (str, type(None)), None, pin=True, doc="pinned hash of the paper's data files"),
    Field("engine_sha256", (str, type(None)), None, pin=True, doc="pinned hash of the audit's source"),
])
"""The declared spec (:class:`shovir_core.protocols.spec.SpecSchema`)."""


def resolve_spec(spec: dict) -> dict:
    """Validate (:data:`SPEC`) and pin the hashes of the paper's data files and of the audit engine.

    Raises
    ------
    ValueError
        On unknown keys, a missing or unknown paper, or a pinned hash that no longer matches.
    """
    out = SPEC.resolve(spec)
    current = {"data_sha256": papers.data_sha256(out["paper"]), "engine_sha256": papers.engine_sha256()}
    for key, sha in current.items():
        SPEC.pin(out, key, sha, what=f"{key} of {out['paper']!r}")
    return out


def execute(name: str, spec: dict, *, progress: bool = True, execution: dict | None = None) -> Run:
    """Run every check of ``spec['paper']`` and write one row per check (``trial_id`` = check id).

    The protocol has no execution-only settings (``execution`` must be empty)."""
    SPEC.execution(execution)
    paper = spec["paper"]
    current = resolve_spec({"paper": paper})
    if current != spec:
        raise StaleSpecError(f"audit: the data files or the audit code of {paper!r} changed since the spec "
                           "was resolved; resolve it again")
    # the paper's values and checks are lru-cached by name: read them again, so the record is
    # computed from the very files whose hashes the spec pins (not a copy loaded before an edit)
    papers.load_values.cache_clear()
    load_checks.cache_clear()
    checks = papers.audit(paper).rename(columns={"id": "check_id"})
    checks.insert(0, "trial_id", checks["check_id"])
    counts = checks["status"].value_counts()
    with RunWriter(PROTOCOL, name, spec) as writer:
        writer.append(checks)
        writer.complete(n_checks=len(checks), n_passed=int(counts.get("passed", 0)),
                        n_flagged=int(counts.get("flagged", 0)), n_values=len(papers.load_values(paper)))
    return load_run(PROTOCOL, name, spec_hash(spec))
