"""Integrity of a run record: what its manifest says against what its directory holds.

On completion the writer lists every part with its row count, size and SHA-256 (of the file's
bytes: cheap, no rows are decoded) and checks that the trial ids are unique across parts. Reading
a record verifies, once per :class:`~shovir_core.records.Run`:

* the stored spec hashes to ``spec_sha256``, whose first 12 digits name the directory, and
  ``run_id`` / the parent directories agree with the manifest;
* a complete record's ``parts/`` holds exactly the listed parts (a deleted part is *missing*, a
  copied or added file is *foreign*), each of the listed size and SHA-256 (a truncated or edited
  part fails), and the listed row counts sum to ``counts.n_trials``;
* a complete schema-1 record (no part list) holds ``counts.n_trials`` rows with unique trial ids.
"""
from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from .files import file_sha256, foreign_files, part_files
from .schema import SHORT_HASH, Manifest, PartInfo, spec_hash
from ..errors import ShovirError

__all__ = ["RecordError", "RecordBusyError", "describe_parts", "check_identity", "check_parts", "read_trial_ids"]


class RecordError(ShovirError, RuntimeError):
    """A run record is unusable (damaged, edited, incomplete or missing); the message names its path."""


class RecordBusyError(RecordError):
    """Another live process writes this record (or this shard of it): nothing is wrong with the record,
    and nothing was lost; make it again when that process has ended. ``run_id`` names the record and
    ``holder`` the process (``<host> <pid>``)."""

    def __init__(self, message: str, *, run_id: str, holder: str) -> None:
        super().__init__(message)
        self.run_id, self.holder = run_id, holder

    def __reduce__(self):  # picklable with its keywords, as an exception raised in a worker process must be
        return _busy, (str(self), self.run_id, self.holder)


def _busy(message: str, run_id: str, holder: str) -> RecordBusyError:
    return RecordBusyError(message, run_id=run_id, holder=holder)


def read_trial_ids(part: Path) -> list[str]:
    """The ``trial_id`` column of one part file."""
    try:
        return pq.read_table(part, columns=["trial_id"]).column("trial_id").to_pylist()
    except Exception as exc:  # noqa: BLE001 - re-raised with the file named
        raise RecordError(f"{part}: unreadable part file ({type(exc).__name__}: {exc})") from exc


def describe_parts(record: Path) -> tuple[tuple[PartInfo, ...], int]:
    """Part list (file, rows, size, SHA-256) of ``record``'s parts and the total row count.

    Raises :class:`RecordError` when a trial id occurs twice (naming the parts that hold it) or a
    foreign file lies in ``parts/``.
    """
    parts_dir = record / "parts"
    foreign = foreign_files(parts_dir)
    if foreign:
        raise RecordError(f"{record}: foreign file(s) {foreign} in parts/ (not part files of this record)")
    infos, seen = [], {}
    for part in part_files(parts_dir):
        ids = read_trial_ids(part)
        for tid in ids:
            if tid in seen:
                raise RecordError(f"{record}: trial_id {tid!r} is stored twice (in {seen[tid]} and {part.name}); "
                                  "two writers ran the same trials: remove one of the parts, then "
                                  "`shovir records complete`")
            seen[tid] = part.name
        infos.append(PartInfo(file=part.name, n_rows=len(ids), size=part.stat().st_size, sha256=file_sha256(part)))
    return tuple(infos), len(seen)


def check_identity(record: Path, m: Manifest) -> None:
    """The spec, its hash, the directory name and the run id agree (raises :class:`RecordError`)."""
    actual = spec_hash(m.spec)
    if actual != m.spec_sha256:
        raise RecordError(f"{record}: the stored spec hashes to {actual[:SHORT_HASH]}..., but spec_sha256 is "
                          f"{str(m.spec_sha256)[:SHORT_HASH]}... (the spec or spec_sha256 was edited)")
    if str(m.spec_sha256)[:SHORT_HASH] != record.name:
        raise RecordError(f"{record}: spec_sha256 {str(m.spec_sha256)[:SHORT_HASH]}... does not match the directory "
                          f"name {record.name} (the spec or spec_sha256 was edited, or the record was moved)")
    expected = f"{record.parent.parent.name}/{record.parent.name}/{record.name}"
    if m.run_id != expected or f"{m.protocol}/{m.name}/{record.name}" != expected:
        raise RecordError(f"{record}: manifest names {m.protocol}/{m.name} (run_id {m.run_id!r}) but lies at "
                          f"{expected}")


def check_parts(record: Path, m: Manifest) -> None:
    """A complete record holds exactly its listed parts, unchanged (raises :class:`RecordError`)."""
    if m.status != "complete":
        return
    parts_dir = record / "parts"
    present = {p.name for p in part_files(parts_dir)} | set(foreign_files(parts_dir))
    if m.parts is None:  # schema 1: no part list; check the total and the ids
        total, seen = 0, set()
        for part in part_files(parts_dir):
            ids = read_trial_ids(part)
            total += len(ids)
            seen.update(ids)
        if m.n_trials is not None and total != m.n_trials:
            raise RecordError(f"{record}: parts hold {total} trial rows, the manifest says n_trials = {m.n_trials} "
                              "(a part was deleted, duplicated or added)")
        if len(seen) != total:
            raise RecordError(f"{record}: {total - len(seen)} duplicated trial id(s) across parts")
        return
    listed = {p.file: p for p in m.parts}
    missing = sorted(set(listed) - present)
    if missing:
        raise RecordError(f"{record}: part(s) {missing} listed in the manifest are missing")
    foreign = sorted(present - set(listed))
    if foreign:
        raise RecordError(f"{record}: foreign file(s) {foreign} in parts/ are not in the manifest "
                          "(a duplicated or added part)")
    for name, info in listed.items():
        size = (parts_dir / name).stat().st_size
        if size != info.size:
            raise RecordError(f"{record}: part {name} has {size} bytes, the manifest says {info.size} "
                              "(truncated or changed)")
        if file_sha256(parts_dir / name) != info.sha256:
            raise RecordError(f"{record}: part {name} does not match its SHA-256 in the manifest (its content changed)")
    total = sum(p.n_rows for p in m.parts)
    if m.n_trials != total:
        raise RecordError(f"{record}: the parts list {total} trial rows, the manifest says n_trials = {m.n_trials}")
