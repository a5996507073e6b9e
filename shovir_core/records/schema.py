"""The run-record schema (version 1).

A run record is the directory ``runs/<protocol>/<name>/<spec-hash>/`` holding

``manifest.json``  the fields of :data:`MANIFEST_FIELDS`;
``parts/part-NNNNNN.parquet``  trial rows, appended atomically (written to a
temporary file, then renamed into place). Every row has a unique ``trial_id``.

The spec hash is the SHA-256 of the canonical JSON of the resolved spec; its
first 12 hex digits name the directory, so the same spec always maps to the same
record and a re-run resumes it.
"""
from __future__ import annotations

import hashlib
import json

__all__ = ["SCHEMA_VERSION", "MANIFEST_FIELDS", "STATUSES", "canonical_json", "spec_hash", "SHORT_HASH"]

SCHEMA_VERSION = 1
SHORT_HASH = 12
STATUSES = ("started", "complete", "failed")

MANIFEST_FIELDS: dict[str, str] = {
    "schema_version": "version of this schema (int)",
    "protocol": "protocol that produced the record (cohort, shovir, modalens, ...)",
    "name": "run name chosen by the params file (e.g. demo)",
    "run_id": "<protocol>/<name>/<spec-hash-12>",
    "status": "started | complete | failed",
    "spec": "the resolved spec: every argument the protocol ran with",
    "spec_sha256": "SHA-256 of canonical_json(spec)",
    "provenance": "git commit + dirty flag, package versions, Python, platform, torch/CUDA/GPU, seeds",
    "dataset": "dataset manifest: name, sha256, counts, credentialed flag",
    "model": "model id, revision and settings, or null",
    "credentialed": "true when derived from credentialed data: the book renders aggregates only",
    "started": "UTC ISO time the record was first opened",
    "ended": "UTC ISO time it completed or failed",
    "counts": "n_trials and any protocol counts (dropped items, cells)",
    "error": "error message when failed",
    "resumed": "number of times the record was reopened after an interruption",
}


def canonical_json(obj) -> str:
    """Deterministic JSON: sorted keys, no whitespace, non-ASCII kept."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def spec_hash(spec: dict) -> str:
    """Full SHA-256 hex digest of a spec."""
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()
