"""Append-only, atomic, resumable writer of run records; several processes may write one record."""
from __future__ import annotations

import contextvars
import datetime as _dt
import hashlib
import json
import os
import re
import secrets
import shutil
import time
import weakref
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .. import paths
from .files import (PART_RE, TryLock, atomic_write_text, claim_part, locked, part_files, stale_temps,
                    temp_path)
from .integrity import RecordBusyError, RecordError, check_identity, describe_parts, read_trial_ids
from .provenance import provenance
from .schema import SHORT_HASH, Manifest, ManifestError, canonical_json, spec_hash
from .shards import Shard, finished_set, read_markers, write_marker
from .stage import STAGE_DIR, Stage

__all__ = ["RunWriter", "record_dir", "RecordError", "atomic_write_text", "writer_defaults", "read_manifest"]

_DEFAULTS: contextvars.ContextVar[dict] = contextvars.ContextVar("shovir_record_writer_defaults", default={})
_UNSET = object()


@contextmanager
def writer_defaults(*, spec_passed: dict | None = None, shard: Shard | None = None):
    """Defaults of :class:`RunWriter` for writers opened inside the block.

    :func:`shovir_core.protocols.run` uses it to hand the spec *as passed* and the shard of this
    process to the writer a protocol opens, so protocol modules keep calling
    ``RunWriter(PROTOCOL, name, spec, ...)`` unchanged.
    """
    token = _DEFAULTS.set({"spec_passed": spec_passed, "shard": shard})
    try:
        yield
    finally:
        _DEFAULTS.reset(token)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def record_dir(protocol: str, name: str, spec: dict, *, root: Path | None = None) -> Path:
    """Directory of the record of ``spec`` (``<root>/<protocol>/<name>/<hash12>``)."""
    for label, value in (("protocol", protocol), ("name", name)):
        if not re.fullmatch(r"[A-Za-z0-9._-]+", value):
            raise RecordError(f"{label} {value!r} may only hold letters, digits, '.', '_' and '-'")
    return Path(root or paths.runs_root()) / protocol / name / spec_hash(spec)[:SHORT_HASH]


def read_manifest(record: Path) -> Manifest | None:
    """The record's manifest (migrated to the current schema), ``None`` when there is none yet.

    Raises :class:`RecordError` naming the file when it is unreadable, not JSON, or not a manifest.
    """
    path = Path(record) / "manifest.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RecordError(f"{record}: manifest.json is unreadable or not JSON ({type(exc).__name__}: {exc})") from exc
    try:
        return Manifest.from_dict(data)
    except (ManifestError, TypeError, ValueError) as exc:
        raise RecordError(f"{record}: manifest.json is not a valid manifest ({exc})") from exc


class RunWriter:
    """Open (or resume) the record of one spec and append trial rows to it.

    Use as a context manager: :meth:`complete` marks the record ``complete`` (with the integrity
    data: every part's row count, size and SHA-256), and the record is marked ``failed`` (with the
    error) when the block raises (a shard's failure is marked on its shard and leaves the record
    open for the other shards). Rows whose ``trial_id`` is already stored -- by this or by any
    other process -- are skipped, so a protocol can call :meth:`append` again after a crash
    without losing or duplicating trials.

    Several processes may write one record as *shards* (``shard=Shard(i, n)``): each writes its
    own part files and marker; :meth:`complete` completes the record only when every shard has
    finished, and otherwise returns ``False``. Two processes never write the same shard at once
    (the second gets a :class:`RecordError` naming the first).

    Parameters
    ----------
    protocol, name : str
        Record location ``runs/<protocol>/<name>/``.
    spec : dict
        The resolved spec (JSON-serialisable). Its hash is the record's identity.
    spec_passed : dict, optional
        The spec as the user passed it (stored beside ``spec``). Defaults to the one set by
        :func:`writer_defaults` (what :func:`shovir_core.protocols.run` passes).
    dataset : dict, optional
        The dataset manifest (:meth:`shovir_core.data.Dataset.manifest`).
    model : dict, optional
        Model id, revision and settings.
    seeds : dict, optional
        Every seed the run uses.
    credentialed : bool
        Flag records derived from credentialed data (the book then renders
        aggregates only). Defaults to the dataset manifest's flag.
    shard : Shard, optional
        This process's shard (default: the one of :func:`writer_defaults`, else the whole grid).
    """

    def __init__(self, protocol: str, name: str, spec: dict, *, dataset: dict | None = None,
                 model: dict | None = None, seeds: dict | None = None,
                 credentialed: bool | None = None, root: Path | None = None,
                 spec_passed: dict | None = _UNSET, shard: Shard | None = _UNSET) -> None:  # type: ignore[assignment]
        defaults = _DEFAULTS.get()
        spec_passed = defaults.get("spec_passed") if spec_passed is _UNSET else spec_passed
        shard = defaults.get("shard") if shard is _UNSET else shard
        for label, value in (("spec", spec), ("spec_passed", spec_passed)):
            try:
                json.loads(canonical_json(value))
            except (TypeError, ValueError) as exc:
                raise RecordError(f"{label} is not JSON-serialisable: {exc}") from exc
        self.protocol, self.name, self.spec = protocol, name, spec
        self.spec_passed = None if spec_passed is None else json.loads(canonical_json(spec_passed))
        self.shard = shard or Shard(0, 1)
        self.path = record_dir(protocol, name, spec, root=root)
        self.parts_dir = self.path / "parts"
        self._dataset, self._model, self._seeds = dataset, model, seeds
        self._credentialed = bool(credentialed if credentialed is not None
                                  else (dataset or {}).get("credentialed", False))
        self._m: Manifest | None = None
        self._done: set[str] = set()
        self._seen: set[str] = set()
        self._next = 0
        self._lock = TryLock(self.path / f".writer-{self.shard.token or 'all'}.lock")
        self._notes: Path | None = None
        self._before_writing: list = []
        self._clock: float | None = None  # monotonic time of the last time accounting
        self._finalizer = weakref.finalize(self, self._lock.release)

    # -- lifecycle -------------------------------------------------------
    def __enter__(self) -> "RunWriter":
        self.open()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc is not None and self._m is not None and not self.is_complete:
                message = f"{exc_type.__name__}: {exc}"
                with self._manifest_lock():
                    current = read_manifest(self.path)
                    if current is not None and current.status != "complete":
                        # a failed shard leaves the record open for the others (its marker says failed)
                        if self.shard.sharded:
                            self._m = current.replace(error=f"shard {self.shard}: {message}")
                        else:
                            self._m = current.replace(status="failed", ended=_now(), error=message)
                        self._write_manifest()
                    if self.shard.sharded:
                        write_marker(self.path, self.shard, status="failed", error=message, ended=_now())
        finally:
            self.close()
        return False

    def close(self) -> None:
        """Release this writer's shard lock (the record stays as it is)."""
        self._flush_before_writing()  # entries no written trial used yet: kept for the next run
        if self._clock is not None and not self.is_complete:
            try:
                with self._manifest_lock():
                    current = read_manifest(self.path)
                    if current is not None and current.status != "complete":
                        self._m = current.replace(seconds=self._elapsed(current))
                        self._write_manifest()
            except (OSError, RecordError):
                pass  # time accounting never hides the error that closed the writer
        self._clock = None
        self._lock.release()

    def _elapsed(self, current: Manifest) -> float:
        """``current.seconds`` plus the time since this writer last accounted (which it then resets)."""
        now = time.monotonic()
        spent = 0.0 if self._clock is None else now - self._clock
        self._clock = now
        return round((current.seconds or 0.0) + spent, 3)

    def _manifest_lock(self):
        return locked(self.path / ".manifest.lock")

    def open(self) -> None:
        """Open the record: create or resume it, or just read it when it is complete."""
        self.parts_dir.mkdir(parents=True, exist_ok=True)
        with self._manifest_lock():
            existing = read_manifest(self.path)
            if existing is not None:
                check_identity(self.path, existing)
                if existing.spec_sha256 != spec_hash(self.spec):  # pragma: no cover - a 12-digit collision
                    raise RecordError(f"{self.path}: stored spec hash differs from this spec (hash prefix collision?)")
            if existing is not None and existing.status == "complete":
                self._m = existing
                self._load_done()
                return
            holder = self._lock.acquire()
            if holder is not None:
                what = f"shard {self.shard} of " if self.shard.sharded else ""
                raise RecordBusyError(f"{self.path}: {what}this record is being written by {holder}; "
                                      "wait for it, or run another shard",
                                      run_id=f"{self.protocol}/{self.name}/{self.path.name}", holder=holder)
            clash = self._live_other_split()
            if clash is not None:
                self._lock.release()
                raise RecordError(f"{self.path}: {clash}; writers that split the grid differently would "
                                  "compute the same trials: wait for them, or use the same --shards")
            try:
                for stale in stale_temps(self.parts_dir):  # in-flight parts of dead processes of this host
                    stale.unlink(missing_ok=True)
                self._load_done()
            except BaseException:
                self._lock.release()
                raise
            self._m = Manifest(
                protocol=self.protocol, name=self.name, run_id=f"{self.protocol}/{self.name}/{self.path.name}",
                status="started", spec=self.spec, spec_sha256=spec_hash(self.spec),
                spec_passed=self.spec_passed if self.spec_passed is not None
                else (existing.spec_passed if existing else None),
                provenance=provenance(seeds=self._seeds), dataset=self._dataset, model=self._model,
                credentialed=self._credentialed, started=(existing.started if existing else None) or _now(),
                counts={"n_trials": len(self._done)}, resumed=(existing.resumed + 1) if existing else 0,
            )
            self._m = self._m.replace(seconds=existing.seconds if existing else None)
            self._write_manifest()
            self._clock = time.monotonic()
            if self.shard.sharded:
                write_marker(self.path, self.shard, status="running", started=_now(), ended=None, error=None)

    def _live_other_split(self) -> str | None:
        """A live writer of this record whose split differs from ours (another shard count, or the
        single-process writer versus shards), described; ``None`` when there is none."""
        mine = self.shard.count if self.shard.sharded else 1
        for lock in sorted(self.path.glob(".writer-*.lock")):
            token = lock.name[len(".writer-"):-len(".lock")]
            count = 1 if token == "all" else Shard.from_token(token).count
            if count == mine:
                continue
            holder = TryLock(lock).held_elsewhere()
            if holder is not None:
                what = "the single-process writer" if token == "all" else f"shard {Shard.from_token(token)}"
                return f"{what} is being written by {holder}"
        return None

    def _load_done(self) -> None:
        self._done, self._seen = set(), set()
        self._next = 0
        self._refresh_done()

    def _refresh_done(self) -> None:
        """Add the trial ids of part files not seen yet (written by this or any other process)."""
        for part in part_files(self.parts_dir):
            if part.name in self._seen:
                continue
            m = PART_RE.match(part.name)
            self._done.update(read_trial_ids(part))
            self._seen.add(part.name)
            if m.group("token") == self.shard.token:
                self._next = max(self._next, int(m.group("num")) + 1)

    # -- state -----------------------------------------------------------
    @property
    def manifest(self) -> dict:
        """The manifest as a JSON object (empty before :meth:`open`)."""
        return {} if self._m is None else self._m.to_dict()

    @property
    def is_complete(self) -> bool:
        return self._m is not None and self._m.status == "complete"

    @property
    def done_ids(self) -> frozenset[str]:
        """Trial ids already stored (by any process, as of the last append)."""
        return frozenset(self._done)

    def stored_ids(self) -> frozenset[str]:
        """Trial ids stored now, by any process (:attr:`done_ids` re-read from the parts written since)."""
        self._refresh_done()
        return frozenset(self._done)

    def _write_manifest(self) -> None:
        atomic_write_text(self.path / "manifest.json",
                          json.dumps(self._m.to_dict(), indent=2, default=str) + "\n")

    # -- writing ---------------------------------------------------------
    def before_writing(self, flush) -> None:
        """Call ``flush()`` (once per distinct callable) before each part is written, before the record
        completes and when the writer closes: an inference cache commits the entries the trials were
        made from before the trials exist (:meth:`shovir_core.models.cache.CachedVLM.record_into`)."""
        if flush not in self._before_writing:
            self._before_writing.append(flush)

    def _flush_before_writing(self) -> None:
        for flush in self._before_writing:
            flush()

    def append(self, rows) -> int:
        """Append trial rows (DataFrame or list of dicts) as one part file; returns the number written.

        Rows whose ``trial_id`` is already stored are skipped; duplicates within
        ``rows`` raise :class:`RecordError`.
        """
        if self._m is None:
            raise RecordError(f"{self.path}: open the writer first (use it as a context manager)")
        if self.is_complete:
            raise RecordError(f"{self.path}: record is complete; open a new spec to add trials")
        df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
        if df.empty:
            return 0
        if "trial_id" not in df.columns:
            raise RecordError("every trial row needs a 'trial_id'")
        df = df.assign(trial_id=df["trial_id"].astype(str))
        dup = df["trial_id"][df["trial_id"].duplicated()]
        if not dup.empty:
            raise RecordError(f"duplicate trial_id {dup.iloc[0]!r} within one append")
        self._refresh_done()
        # membership per new row: Series.isin(a set) converts the whole set on every call, quadratic over a
        # record's appends (190 of 695 s of one full-scale ShoViR record, profiled)
        done = self._done
        df = df[np.fromiter((t not in done for t in df["trial_id"]), dtype=bool, count=len(df))]
        if df.empty:
            return 0
        self._flush_before_writing()
        table = pa.Table.from_pandas(df.reset_index(drop=True), preserve_index=False)
        tmp = temp_path(self.parts_dir)
        try:
            pq.write_table(table, tmp)
            final, number = claim_part(tmp, self.parts_dir, self.shard.token, self._next)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._next = number + 1
        self._seen.add(final.name)
        self._done.update(df["trial_id"])
        self._m = self._m.replace(counts={**self._m.counts, "n_trials": len(self._done)})
        return len(df)

    CACHE_NOTES = ".cache-entries"
    """``<record>/.cache-entries/<writer>.jsonl``: inference-cache entries (key -> seal) each writer
    session used, gathered into ``cache_entries.json`` when the record completes."""

    def note_cache_entries(self, cache_file: str, entries: dict[str, str]) -> None:
        """Note the inference-cache entries (``{key: entry_sha256}``) trials of this record were made from.

        Called by :class:`shovir_core.models.cache.CachedVLM` before the trials are appended, so every
        written trial's entries are noted even if the process dies right after.
        """
        if not entries or self.is_complete:
            return
        if self._notes is None:
            folder = self.path / self.CACHE_NOTES
            folder.mkdir(exist_ok=True)
            self._notes = folder / f"{self.shard.token or 'all'}-{os.getpid()}-{secrets.token_hex(4)}.jsonl"
        with open(self._notes, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"file": cache_file, "entries": entries}) + "\n")

    def _gather_cache_entries(self) -> dict | None:
        """Write ``cache_entries.json`` from the writers' notes; the manifest's ``inference_cache`` (or None)."""
        folder = self.path / self.CACHE_NOTES
        files: dict[str, dict[str, str]] = {}
        for note in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
            for line in note.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:  # a line a killed writer left half-written: its trials were not appended
                    continue
                files.setdefault(entry["file"], {}).update(entry["entries"])
        if not files:
            return None
        text = json.dumps({"files": {f: dict(sorted(e.items())) for f, e in sorted(files.items())}},
                          indent=0, sort_keys=True) + "\n"
        atomic_write_text(self.path / "cache_entries.json", text)
        return {"entries_file": "cache_entries.json", "sha256": hashlib.sha256(text.encode()).hexdigest(),
                "n_entries": sum(len(e) for e in files.values()), "cache_files": sorted(files)}

    def stage(self, phase: str) -> Stage:
        """The staged chunks of ``phase`` of this record (:class:`~shovir_core.records.stage.Stage`): a
        protocol whose trials wait for a whole phase keeps that phase's chunks there, so a killed run
        resumes them; they are removed when the record completes."""
        return Stage(self.path, phase)

    def plan_shard(self, n_trials: int) -> None:
        """Record how many trials this shard plans to hold (shown by ``shovir jobs status``)."""
        if self.shard.sharded and not self.is_complete:
            with self._manifest_lock():
                # a resumed shard plans its whole share again; the trials it cannot make are dropped again
                write_marker(self.path, self.shard, planned=int(n_trials), dropped=0)

    def unplan(self, n_trials: int) -> None:
        """``n_trials`` planned trials will never exist (e.g. a DOCO item whose box set is empty): the
        shard's ``planned`` drops by that many and its ``dropped`` grows, so planned equals written when
        the shard is done."""
        if self.shard.sharded and not self.is_complete and n_trials:
            with self._manifest_lock():
                marker = read_markers(self.path).get(self.shard.token, {})
                write_marker(self.path, self.shard, planned=int(marker.get("planned") or 0) - int(n_trials),
                             dropped=int(marker.get("dropped") or 0) + int(n_trials))

    def note_staged(self, n_staged: int) -> None:
        """This shard's trials computed and staged so far (:meth:`stage`), not yet written: shown by
        ``shovir jobs status`` beside ``planned`` and ``written``."""
        if self.shard.sharded and not self.is_complete:
            with self._manifest_lock():
                write_marker(self.path, self.shard, staged=int(n_staged))

    def shard_done(self) -> bool:
        """Mark this shard finished; ``True`` when every shard's trials are now present.

        Exactly one of several shards finishing at once sees ``True`` first (the markers are
        updated under the record's lock); a single-process writer always gets ``True``.
        """
        if self.is_complete or not self.shard.sharded:
            return True
        with self._manifest_lock():
            current = read_manifest(self.path)
            if current is not None and current.status != "complete" and self._clock is not None:
                self._m = current.replace(seconds=self._elapsed(current))
                self._write_manifest()
            write_marker(self.path, self.shard, status="done", ended=_now(), error=None)
            return finished_set(read_markers(self.path)) is not None

    def complete(self, **counts) -> bool:
        """Complete the record with final counts (plus ``n_trials``) once every shard has finished.

        Lists every part with its row count, size and SHA-256 and checks that trial ids are unique
        across parts. Returns ``False`` (and leaves the record open) while other shards are still
        missing; ``True`` once the record is complete.
        """
        if self._m is None:
            raise RecordError(f"{self.path}: open the writer first (use it as a context manager)")
        if self.is_complete:  # opened complete (completed by another shard meanwhile): drop what this one staged
            shutil.rmtree(self.path / STAGE_DIR, ignore_errors=True)
            return True
        self._flush_before_writing()
        if not self.shard_done():
            return False
        with self._manifest_lock():
            current = read_manifest(self.path)
            if current is not None and current.status == "complete":
                self._m = current
                shutil.rmtree(self.path / STAGE_DIR, ignore_errors=True)  # completed by another shard meanwhile
                return True
            parts, total = describe_parts(self.path)
            markers = read_markers(self.path)
            # the shard count that split the grid, also when one process completes a sharded record
            # (`shovir records complete`); 1 when no shard ever wrote it
            n_shards = finished_set(markers) or max((Shard.from_token(t).count for t in markers), default=1)
            base = current or self._m
            cache = self._gather_cache_entries()
            self._m = base.replace(
                status="complete", ended=_now(), error=None, parts=parts, shards=n_shards, inference_cache=cache,
                seconds=self._elapsed(base),
                spec_passed=base.spec_passed if base.spec_passed is not None else self.spec_passed,
                counts={**base.counts, **counts, "n_trials": total})
            self._write_manifest()
            shutil.rmtree(self.path / STAGE_DIR, ignore_errors=True)  # staged chunks now live in the parts
        self.close()
        return True
