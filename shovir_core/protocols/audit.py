"""The ``audit`` protocol: check a paper's published numbers, one trial row per check.

The audit is pure arithmetic on the data files shipped in :mod:`shovir_core.papers`;
running it as a protocol puts its result in a run record like every other number
of the book, so the audit chapters read records only. The resolved spec carries
the SHA-256 of the paper's data files and of the audit's source, so a change of
either makes a new record.

Spec
----
``paper``: ``"shovir"`` or ``"modalens"`` (required).
"""
from __future__ import annotations

from .. import papers
from ..records import Run, RunWriter, load_run, spec_hash

__all__ = ["resolve_spec", "execute"]

PROTOCOL = "audit"


def resolve_spec(spec: dict) -> dict:
    """Fill the hashes of the paper's data files and of the audit engine.

    Raises
    ------
    ValueError
        On unknown keys, a missing or unknown paper.
    """
    unknown = set(spec) - {"paper", "data_sha256", "engine_sha256"}
    if unknown:
        raise ValueError(f"audit: unknown spec keys {sorted(unknown)} (allowed: paper)")
    paper = spec.get("paper")
    if paper not in papers.PAPERS:
        raise ValueError(f"audit: spec needs paper in {sorted(papers.PAPERS)}, got {paper!r}")
    return {"paper": paper, "data_sha256": papers.data_sha256(paper), "engine_sha256": papers.engine_sha256()}


def execute(name: str, spec: dict, *, progress: bool = True) -> Run:
    """Run every check of ``spec['paper']`` and write one row per check (``trial_id`` = check id)."""
    paper = spec["paper"]
    current = resolve_spec({"paper": paper})
    if current != spec:
        raise RuntimeError(f"audit: the data files or the audit code of {paper!r} changed since the spec "
                           "was resolved; resolve it again")
    checks = papers.audit(paper).rename(columns={"id": "check_id"})
    checks.insert(0, "trial_id", checks["check_id"])
    counts = checks["status"].value_counts()
    with RunWriter(PROTOCOL, name, spec) as writer:
        writer.append(checks)
        writer.complete(n_checks=len(checks), n_passed=int(counts.get("passed", 0)),
                        n_flagged=int(counts.get("flagged", 0)), n_values=len(papers.load_values(paper)))
    return load_run(PROTOCOL, name, spec_hash(spec))
