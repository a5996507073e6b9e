"""Append-only, atomic, resumable writer of run records."""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .. import paths
from .provenance import provenance
from .schema import SCHEMA_VERSION, SHORT_HASH, canonical_json, spec_hash

__all__ = ["RunWriter", "record_dir", "RecordError", "atomic_write_text"]

_PART = re.compile(r"^part-(\d{6})\.parquet$")


class RecordError(RuntimeError):
    """A run record is unusable (bad spec, duplicate trial ids, corrupt part)."""


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def record_dir(protocol: str, name: str, spec: dict, *, root: Path | None = None) -> Path:
    """Directory of the record of ``spec`` (``<root>/<protocol>/<name>/<hash12>``)."""
    for label, value in (("protocol", protocol), ("name", name)):
        if not re.fullmatch(r"[A-Za-z0-9._-]+", value):
            raise RecordError(f"{label} {value!r} may only hold letters, digits, '.', '_' and '-'")
    return Path(root or paths.runs_root()) / protocol / name / spec_hash(spec)[:SHORT_HASH]


class RunWriter:
    """Open (or resume) the record of one spec and append trial rows to it.

    Use as a context manager: the record is marked ``complete`` by
    :meth:`complete`, and ``failed`` (with the error) when the block raises.
    Rows whose ``trial_id`` is already stored are skipped, so a protocol can
    call :meth:`append` again after a crash without losing or duplicating trials.

    Parameters
    ----------
    protocol, name : str
        Record location ``runs/<protocol>/<name>/``.
    spec : dict
        The resolved spec (JSON-serialisable). Its hash is the record's identity.
    dataset : dict, optional
        The dataset manifest (:meth:`shovir_core.data.Dataset.manifest`).
    model : dict, optional
        Model id, revision and settings.
    seeds : dict, optional
        Every seed the run uses.
    credentialed : bool
        Flag records derived from credentialed data (the book then renders
        aggregates only). Defaults to the dataset manifest's flag.
    """

    def __init__(self, protocol: str, name: str, spec: dict, *, dataset: dict | None = None,
                 model: dict | None = None, seeds: dict | None = None,
                 credentialed: bool | None = None, root: Path | None = None) -> None:
        try:
            canonical_json(spec)
            json.loads(canonical_json(spec))
        except (TypeError, ValueError) as exc:
            raise RecordError(f"spec is not JSON-serialisable: {exc}") from exc
        self.protocol, self.name, self.spec = protocol, name, spec
        self.path = record_dir(protocol, name, spec, root=root)
        self.parts_dir = self.path / "parts"
        self._dataset, self._model, self._seeds = dataset, model, seeds
        self._credentialed = bool(credentialed if credentialed is not None
                                  else (dataset or {}).get("credentialed", False))
        self.manifest: dict = {}
        self._done: set[str] = set()
        self._n_parts = 0

    # -- lifecycle -------------------------------------------------------
    def __enter__(self) -> "RunWriter":
        self.open()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is not None and self.manifest.get("status") != "complete":
            self._set(status="failed", ended=_now(), error=f"{exc_type.__name__}: {exc}")
        return False

    def open(self) -> None:
        self.parts_dir.mkdir(parents=True, exist_ok=True)
        for stale in self.parts_dir.glob(".*.tmp"):  # a crash while writing a part
            stale.unlink()
        manifest_path = self.path / "manifest.json"
        if manifest_path.is_file():
            self.manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            if self.manifest.get("spec_sha256") != spec_hash(self.spec):
                raise RecordError(f"{self.path}: stored spec hash differs from this spec (hash prefix collision?)")
        self._load_done()
        if self.manifest.get("status") == "complete":
            return
        resumed = self.manifest.get("resumed", -1) + 1
        self.manifest = {
            "schema_version": SCHEMA_VERSION,
            "protocol": self.protocol,
            "name": self.name,
            "run_id": f"{self.protocol}/{self.name}/{self.path.name}",
            "status": "started",
            "spec": self.spec,
            "spec_sha256": spec_hash(self.spec),
            "provenance": provenance(seeds=self._seeds),
            "dataset": self._dataset,
            "model": self._model,
            "credentialed": self._credentialed,
            "started": self.manifest.get("started", _now()),
            "ended": None,
            "counts": {"n_trials": len(self._done)},
            "error": None,
            "resumed": resumed,
        }
        self._write_manifest()

    def _load_done(self) -> None:
        self._done = set()
        numbers = []
        for part in sorted(self.parts_dir.glob("part-*.parquet")):
            m = _PART.match(part.name)
            if not m:
                continue
            numbers.append(int(m.group(1)))
            try:
                ids = pq.read_table(part, columns=["trial_id"]).column("trial_id").to_pylist()
            except Exception as exc:  # noqa: BLE001 - re-raised with the file named
                raise RecordError(f"{part}: unreadable part file ({exc})") from exc
            self._done.update(ids)
        self._n_parts = max(numbers, default=-1) + 1

    # -- state -----------------------------------------------------------
    @property
    def is_complete(self) -> bool:
        return self.manifest.get("status") == "complete"

    @property
    def done_ids(self) -> frozenset[str]:
        """Trial ids already stored."""
        return frozenset(self._done)

    def _write_manifest(self) -> None:
        atomic_write_text(self.path / "manifest.json", json.dumps(self.manifest, indent=2, default=str) + "\n")

    def _set(self, **fields) -> None:
        self.manifest.update(fields)
        self._write_manifest()

    # -- writing ---------------------------------------------------------
    def append(self, rows) -> int:
        """Append trial rows (DataFrame or list of dicts); returns the number written.

        Rows whose ``trial_id`` is already stored are skipped; duplicates within
        ``rows`` raise :class:`RecordError`.
        """
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
        df = df[~df["trial_id"].isin(self._done)]
        if df.empty:
            return 0
        table = pa.Table.from_pandas(df.reset_index(drop=True), preserve_index=False)
        final = self.parts_dir / f"part-{self._n_parts:06d}.parquet"
        fd, tmp = tempfile.mkstemp(dir=self.parts_dir, prefix=f".{final.name}.", suffix=".tmp")
        os.close(fd)
        try:
            pq.write_table(table, tmp)
            os.replace(tmp, final)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._n_parts += 1
        self._done.update(df["trial_id"])
        self.manifest["counts"]["n_trials"] = len(self._done)
        return len(df)

    def complete(self, **counts) -> None:
        """Mark the record complete, with final counts (plus ``n_trials``)."""
        self._set(status="complete", ended=_now(), error=None,
                  counts={**self.manifest.get("counts", {}), **counts, "n_trials": len(self._done)})
