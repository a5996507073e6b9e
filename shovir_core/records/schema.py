"""The run-record schema (version 2): a typed, versioned manifest.

A run record is the directory ``runs/<protocol>/<name>/<spec-hash-12>/`` holding

``manifest.json``
    one :class:`Manifest` (JSON); older schema versions are migrated on reading
    (:func:`Manifest.from_dict`);
``parts/part-NNNNNN.parquet`` and ``parts/part-s<i>of<n>-NNNNNN.parquet``
    trial rows, appended atomically: each part is written to a per-process temporary file and
    linked into place under a name no other process holds (shard ``i`` of ``n`` writes its own
    ``part-s<i>of<n>-*`` files). Every row has a unique ``trial_id``;
``shards/s<i>of<n>.json``
    one marker per shard of a sharded record: its plan, progress and status.

The spec hash is the SHA-256 of the canonical JSON of the resolved spec; its first 12 hex digits
name the directory, so the same spec always maps to the same record and a re-run resumes it.
When a record completes its manifest lists every part with its row count, size and SHA-256, and
the total; readers verify them (:meth:`shovir_core.records.Run.verify`).

Version history
---------------
1. manifest without part integrity data and without the passed spec.
2. ``parts`` (per-part file name, row count, size, SHA-256), ``spec_passed`` (the spec as the
   user passed it, beside the resolved one, as ``inspect_ai`` keeps ``task_args_passed``) and
   ``shards`` (how many shards made the record).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import ShovirError

__all__ = [
    "SCHEMA_VERSION", "MANIFEST_FIELDS", "STATUSES", "canonical_json", "spec_hash", "SHORT_HASH",
    "Manifest", "PartInfo", "ManifestError", "migrate",
]

SCHEMA_VERSION = 2
SHORT_HASH = 12
STATUSES = ("started", "complete", "failed")


class ManifestError(ShovirError, ValueError):
    """A manifest's content is not a valid manifest of any known schema version."""


def canonical_json(obj) -> str:
    """Deterministic JSON: sorted keys, no whitespace, non-ASCII kept."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def spec_hash(spec: dict) -> str:
    """Full SHA-256 hex digest of a spec."""
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()


def _doc(text: str, **kwargs) -> Any:
    return field(metadata={"doc": text}, **kwargs)


@dataclass(frozen=True)
class PartInfo:
    """One part file of a complete record, as its manifest lists it."""

    file: str = _doc("file name under ``parts/``")
    n_rows: int = _doc("trial rows in the part")
    size: int = _doc("size of the file in bytes (a truncated part fails this before any hashing)")
    sha256: str = _doc("SHA-256 of the file's bytes")

    @classmethod
    def from_dict(cls, d: dict) -> "PartInfo":
        if not isinstance(d, dict) or set(d) != {f.name for f in dataclasses.fields(cls)}:
            raise ManifestError(f"a part entry must have the keys file, n_rows, size, sha256; got {d!r}")
        return cls(file=str(d["file"]), n_rows=int(d["n_rows"]), size=int(d["size"]), sha256=str(d["sha256"]))


@dataclass(frozen=True)
class Manifest:
    """The manifest of one run record (schema version :data:`SCHEMA_VERSION`)."""

    protocol: str = _doc("protocol that produced the record (cohort, shovir, modalens, ...)")
    name: str = _doc("run name chosen by the params file (e.g. demo)")
    run_id: str = _doc("``<protocol>/<name>/<spec-hash-12>``")
    status: str = _doc("started | complete | failed")
    spec: dict = _doc("the resolved spec: every argument the protocol ran with (hashed: the identity)")
    spec_sha256: str = _doc("SHA-256 of ``canonical_json(spec)``; its first 12 digits name the directory")
    schema_version: int = _doc("version of this schema (int)", default=SCHEMA_VERSION)
    spec_passed: dict | None = _doc("the spec as it was passed (before defaults were filled and identities "
                                    "pinned; null for records made before schema 2)", default=None)
    provenance: dict = _doc("git commit + dirty flag, package versions, Python, platform, torch/CUDA/GPU, "
                            "seeds (of the last process that opened the record)", default_factory=dict)
    dataset: dict | None = _doc("dataset manifest: name, sha256, counts, credentialed flag", default=None)
    model: dict | None = _doc("model id, revision and settings, or null", default=None)
    credentialed: bool = _doc("true when derived from credentialed data: the book renders aggregates only",
                              default=False)
    started: str | None = _doc("UTC ISO time the record was first opened", default=None)
    ended: str | None = _doc("UTC ISO time it completed or failed", default=None)
    counts: dict = _doc("``n_trials`` (the total over all parts) and any protocol counts", default_factory=dict)
    error: str | None = _doc("error message when failed", default=None)
    resumed: int = _doc("number of times the record was reopened after the first opening", default=0)
    parts: tuple[PartInfo, ...] | None = _doc(
        "every part file with its row count, size and SHA-256, set on completion (null before, "
        "and for schema-1 records)", default=None)
    shards: int | None = _doc("number of shards whose trials completed the record (1: one process)",
                              default=None)
    seconds: float | None = _doc("wall-clock seconds writers held the record open, summed over sessions and "
                                 "shards (compute time; a killed writer's time since it last finished a shard "
                                 "or closed is not counted; null for schema-1 records)", default=None)
    inference_cache: dict | None = _doc("the inference-cache entries the trials were made from: "
                                        "``entries_file`` (``cache_entries.json``: key -> entry seal per cache "
                                        "file), its ``sha256``, ``n_entries`` and ``cache_files``; null when "
                                        "no cache was used (or before it was recorded)", default=None)

    # -- conversion ------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict) -> "Manifest":
        """A manifest from its JSON object, migrating older schema versions (:func:`migrate`)."""
        data = migrate(data)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ManifestError(f"unknown manifest field(s) {unknown}")
        required = [f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [k for k in required if k not in data]
        if missing:
            raise ManifestError(f"manifest lacks the field(s) {missing}")
        if data["status"] not in STATUSES:
            raise ManifestError(f"status {data['status']!r} is not one of {list(STATUSES)}")
        if not isinstance(data["spec"], dict):
            raise ManifestError("spec is not a mapping")
        if not isinstance(data.get("counts") or {}, dict):
            raise ManifestError("counts is not a mapping")
        parts = data.get("parts")
        if parts is not None:
            if not isinstance(parts, list):
                raise ManifestError("parts is not a list")
            parts = tuple(PartInfo.from_dict(p) for p in parts)
        values = {**data, "parts": parts, "counts": dict(data.get("counts") or {}),
                  "provenance": dict(data.get("provenance") or {})}
        return cls(**values)

    def to_dict(self) -> dict:
        """The JSON object written to ``manifest.json`` (field order of the dataclass)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "parts" and value is not None:
                value = [dataclasses.asdict(p) for p in value]
            out[f.name] = value
        # keep the familiar key order of schema 1 first
        order = ["schema_version", "protocol", "name", "run_id", "status", "spec", "spec_passed", "spec_sha256"]
        return {**{k: out[k] for k in order}, **{k: v for k, v in out.items() if k not in order}}

    def replace(self, **changes) -> "Manifest":
        return dataclasses.replace(self, **changes)

    @property
    def n_trials(self) -> int | None:
        """The stored total of trial rows (``counts.n_trials``)."""
        n = self.counts.get("n_trials")
        return None if n is None else int(n)


def _migrate_v1(data: dict) -> dict:
    """Schema 1 -> 2: no part integrity data, no passed spec, no shard count (all stay null)."""
    return {**data, "schema_version": 2, "spec_passed": None, "parts": None, "shards": None, "seconds": None}


_MIGRATIONS = {1: _migrate_v1}


def migrate(data: dict) -> dict:
    """``data`` (a manifest's JSON object of any known schema version) in the current version."""
    if not isinstance(data, dict):
        raise ManifestError(f"a manifest must be a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ManifestError(f"schema_version {version!r} is not an integer")
    if version > SCHEMA_VERSION:
        raise ManifestError(f"schema version {version} is newer than this shovir-core's {SCHEMA_VERSION}; "
                            "upgrade shovir-core to read it")
    if version < 1:
        raise ManifestError(f"schema version {version} is not known")
    while version < SCHEMA_VERSION:
        data = _MIGRATIONS[version](data)
        version = data["schema_version"]
    return data


MANIFEST_FIELDS: dict[str, str] = {f.name: f.metadata["doc"] for f in dataclasses.fields(Manifest)}
"""Every manifest field with its description (from :class:`Manifest`)."""

PART_FIELDS: dict[str, str] = {f.name: f.metadata["doc"] for f in dataclasses.fields(PartInfo)}

Manifest.__doc__ += "\n\nFields\n------\n" + "\n".join(
    f"{name}\n    {doc}" for name, doc in MANIFEST_FIELDS.items())
PartInfo.__doc__ += "\n\nFields\n------\n" + "\n".join(f"{name}\n    {doc}" for name, doc in PART_FIELDS.items())
