"""Read run records into pandas; every read is verified (:mod:`shovir_core.records.integrity`)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from .. import paths
from .files import part_files
from .integrity import RecordError, check_identity, check_parts
from .schema import Manifest
from .writer import read_manifest

__all__ = ["Run", "load_run", "runs_df", "trials_df", "record_paths", "READ_LOG_ENV", "RUNS_COLUMNS"]

READ_LOG_ENV = "SHOVIR_READ_LOG"
"""When set, every record loaded is appended to this file (the book runner uses it)."""


@dataclass(frozen=True)
class Run:
    """One run record on disk.

    ``info`` is the typed manifest (:class:`~shovir_core.records.schema.Manifest`, older schema
    versions migrated); ``manifest`` the same as a JSON object. :meth:`verify` checks the record's
    identity and, once complete, its parts (once per ``Run`` object); :attr:`trials` verifies first.
    """

    path: Path

    @cached_property
    def info(self) -> Manifest:
        """The typed manifest; :class:`RecordError` when it is missing, unreadable or invalid."""
        m = read_manifest(self.path)
        if m is None:
            raise RecordError(f"{self.path}: no manifest.json (not a run record, or its manifest was deleted)")
        return m

    @cached_property
    def manifest(self) -> dict:
        """The manifest as a JSON object (current schema)."""
        return self.info.to_dict()

    @property
    def run_id(self) -> str:
        return self.info.run_id

    @property
    def status(self) -> str:
        return self.info.status

    @property
    def credentialed(self) -> bool:
        return bool(self.info.credentialed)

    def verify(self) -> "Run":
        """Check the spec hash, the directory name and (complete records) every part; returns ``self``.

        Raises :class:`RecordError` naming the record and what is wrong. Done once per object.
        """
        if not self.__dict__.get("_verified"):
            check_identity(self.path, self.info)
            check_parts(self.path, self.info)
            self.__dict__["_verified"] = True
        return self

    @property
    def problem(self) -> str | None:
        """What is wrong with the record (``None`` when it verifies)."""
        try:
            self.verify()
        except RecordError as exc:
            return str(exc)
        return None

    def part_paths(self) -> list[Path]:
        """The record's part files: the manifest's list once complete, else those present."""
        if self.info.status == "complete" and self.info.parts is not None:
            return [self.path / "parts" / p.file for p in self.info.parts]
        return part_files(self.path / "parts")

    @cached_property
    def trials(self) -> pd.DataFrame:
        """All trial rows, in part order (verified first; trial ids are unique)."""
        self.verify()
        parts = self.part_paths()
        if not parts:
            return pd.DataFrame({"trial_id": pd.Series(dtype=str)})
        frames = []
        for p in parts:
            try:
                frames.append(pq.read_table(p).to_pandas())
            except Exception as exc:  # noqa: BLE001 - re-raised with the file named
                raise RecordError(f"{self.path}: unreadable part {p.name} ({type(exc).__name__}: {exc})") from exc
        df = pd.concat(frames, ignore_index=True)
        dup = df["trial_id"][df["trial_id"].duplicated()]
        if not dup.empty:
            raise RecordError(f"{self.path}: trial_id {dup.iloc[0]!r} is stored more than once")
        return df

    def n_rows_present(self) -> int:
        """Trial rows in the part files present (from Parquet footers; no data is read)."""
        return sum(pq.read_metadata(p).num_rows for p in part_files(self.path / "parts"))


def _log_read(run: Run) -> None:
    log = os.environ.get(READ_LOG_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"run_id": run.run_id, "path": str(run.path),
                                 "spec_sha256": run.info.spec_sha256,
                                 "credentialed": run.credentialed}) + "\n")


def _candidates(root: Path, protocol: str | None = None, name: str | None = None) -> list[Path]:
    pattern = f"{protocol or '*'}/{name or '*'}/*/manifest.json"
    return sorted(p.parent for p in root.glob(pattern) if not p.parts[len(root.parts)].startswith("."))


def record_paths(root: Path | None = None, *, protocol: str | None = None) -> list[Path]:
    """Every record directory under ``root``: those with a manifest, and those with parts but none."""
    root = Path(root or paths.runs_root())
    found = set(_candidates(root, protocol))
    for parts in root.glob(f"{protocol or '*'}/*/*/parts"):
        if parts.is_dir() and not parts.parts[len(root.parts)].startswith("."):
            found.add(parts.parent)
    return sorted(found)


def load_run(protocol: str, name: str, spec_hash: str | None = None, *, root: Path | None = None,
             require_complete: bool = True) -> Run:
    """The record ``runs/<protocol>/<name>/<spec_hash>``, verified.

    Without ``spec_hash``, the most recently completed record of that name.
    Raises :class:`RecordError` naming what is missing or wrong and how to make it.
    """
    root = Path(root or paths.runs_root())
    if spec_hash:
        matches = [p for p in _candidates(root, protocol, name) if p.name.startswith(spec_hash[:12])]
    else:
        matches = _candidates(root, protocol, name)
    runs = [Run(p) for p in matches]
    if require_complete:
        runs = [r for r in runs if r.status == "complete"]
    if not runs:
        raise RecordError(
            f"no {'complete ' if require_complete else ''}record {protocol}/{name}"
            f"{'/' + spec_hash if spec_hash else ''} under {root}; "
            f"make it with `shovir run` (see `shovir run --help`)"
        )
    run = max(runs, key=lambda r: (r.info.ended or "", r.path.name))
    run.verify()
    _log_read(run)
    return run


RUNS_COLUMNS = ["run_id", "protocol", "name", "spec_sha256", "status", "started", "ended", "n_trials",
                "dataset", "dataset_sha256", "model", "credentialed", "git_commit", "git_dirty", "path", "problem"]


def _row(run: Run) -> dict:
    m = run.info
    prov = m.provenance or {}
    model = m.model.get("id") if isinstance(m.model, dict) else m.model
    n = m.n_trials if m.status == "complete" else run.n_rows_present()
    return {
        "run_id": m.run_id, "protocol": m.protocol, "name": m.name, "spec_sha256": m.spec_sha256,
        "status": m.status, "started": m.started, "ended": m.ended, "n_trials": n,
        "dataset": (m.dataset or {}).get("name"), "dataset_sha256": (m.dataset or {}).get("sha256"),
        "model": model, "credentialed": bool(m.credentialed),
        "git_commit": (prov.get("git") or {}).get("commit"), "git_dirty": (prov.get("git") or {}).get("dirty"),
        "path": str(run.path), "problem": None,
    }


def runs_df(root: Path | None = None, *, protocol: str | None = None, on_error: str = "raise") -> pd.DataFrame:
    """One row per run record: identity, status, times, counts, dataset, model, git, problem.

    Every record is verified. ``on_error="raise"`` (default) raises the first :class:`RecordError`
    (or ``OSError``); ``"report"`` lists bad and unreadable records too (e.g. a part this user may
    not read), with what is wrong in ``problem`` (and the fields that could still be read). For records not yet complete, ``n_trials`` counts the rows present.
    """
    if on_error not in ("raise", "report"):
        raise ValueError(f"on_error={on_error!r}; use 'raise' or 'report'")
    root = Path(root or paths.runs_root())
    rows = []
    paths_ = record_paths(root, protocol=protocol) if on_error == "report" else _candidates(root, protocol)
    for path in paths_:
        run = Run(path)
        try:
            run.verify()
            rows.append(_row(run))
        except (RecordError, OSError) as exc:  # OSError: e.g. a part or manifest this user may not read
            if on_error == "raise":
                raise
            try:
                row = _row(run)
            except (RecordError, OSError, ValueError):
                rel = path.relative_to(root)
                row = {c: None for c in RUNS_COLUMNS}
                row.update({"run_id": "/".join(rel.parts), "protocol": rel.parts[0], "name": rel.parts[1],
                            "status": "unreadable", "path": str(path), "credentialed": False})
            row["problem"] = str(exc) if isinstance(exc, RecordError) else \
                f"{path}: unreadable ({type(exc).__name__}: {exc})"
            rows.append(row)
    return pd.DataFrame(rows, columns=RUNS_COLUMNS)


def trials_df(run: Run | str | Path, *, with_run_id: bool = True) -> pd.DataFrame:
    """Trial rows of a record (a :class:`Run`, a record path, or ``protocol/name[/hash]``), verified."""
    if isinstance(run, (str, Path)) and Path(run, "manifest.json").is_file():
        run = Run(Path(run)).verify()
        _log_read(run)
    elif isinstance(run, str):
        protocol, name, *rest = run.split("/")
        run = load_run(protocol, name, rest[0] if rest else None)
    df = run.trials.copy()
    if with_run_id:
        df.insert(0, "run_id", run.run_id)
    return df
