"""Read run records into pandas."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from .. import paths
from .schema import SCHEMA_VERSION
from .writer import RecordError

__all__ = ["Run", "load_run", "runs_df", "trials_df", "READ_LOG_ENV"]

READ_LOG_ENV = "SHOVIR_READ_LOG"
"""When set, every record loaded is appended to this file (the book runner uses it)."""


@dataclass(frozen=True)
class Run:
    """One run record on disk."""

    path: Path

    @cached_property
    def manifest(self) -> dict:
        return json.loads((self.path / "manifest.json").read_text(encoding="utf-8"))

    @property
    def run_id(self) -> str:
        return self.manifest["run_id"]

    @property
    def status(self) -> str:
        return self.manifest["status"]

    @property
    def credentialed(self) -> bool:
        return bool(self.manifest.get("credentialed"))

    @cached_property
    def trials(self) -> pd.DataFrame:
        """All trial rows, in part order."""
        parts = sorted((self.path / "parts").glob("part-*.parquet"))
        if not parts:
            return pd.DataFrame({"trial_id": pd.Series(dtype=str)})
        return pd.concat([pq.read_table(p).to_pandas() for p in parts], ignore_index=True)


def _log_read(run: Run) -> None:
    log = os.environ.get(READ_LOG_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"run_id": run.run_id, "path": str(run.path),
                                 "spec_sha256": run.manifest["spec_sha256"],
                                 "credentialed": run.credentialed}) + "\n")


def _candidates(root: Path, protocol: str | None = None, name: str | None = None) -> list[Path]:
    pattern = f"{protocol or '*'}/{name or '*'}/*/manifest.json"
    return sorted(p.parent for p in root.glob(pattern))


def load_run(protocol: str, name: str, spec_hash: str | None = None, *, root: Path | None = None,
             require_complete: bool = True) -> Run:
    """The record ``runs/<protocol>/<name>/<spec_hash>``.

    Without ``spec_hash``, the most recently completed record of that name.
    Raises :class:`RecordError` naming what is missing and how to make it.
    """
    root = Path(root or paths.runs_root())
    if spec_hash:
        matches = [p for p in _candidates(root, protocol, name) if p.name.startswith(spec_hash[:12])]
    else:
        matches = _candidates(root, protocol, name)
    runs = [Run(p) for p in matches]
    for run in runs:
        if run.manifest.get("schema_version") != SCHEMA_VERSION:
            raise RecordError(f"{run.path}: schema version {run.manifest.get('schema_version')} != {SCHEMA_VERSION}")
    if require_complete:
        runs = [r for r in runs if r.status == "complete"]
    if not runs:
        raise RecordError(
            f"no {'complete ' if require_complete else ''}record {protocol}/{name}"
            f"{'/' + spec_hash if spec_hash else ''} under {root}; "
            f"make it with `shovir run` (see `shovir run --help`)"
        )
    run = max(runs, key=lambda r: (r.manifest.get("ended") or "", r.path.name))
    _log_read(run)
    return run


def runs_df(root: Path | None = None, *, protocol: str | None = None) -> pd.DataFrame:
    """One row per run record: identity, status, times, counts, dataset, model, git."""
    root = Path(root or paths.runs_root())
    rows = []
    for path in _candidates(root, protocol):
        m = Run(path).manifest
        prov = m.get("provenance") or {}
        rows.append({
            "run_id": m.get("run_id"), "protocol": m.get("protocol"), "name": m.get("name"),
            "spec_sha256": m.get("spec_sha256"), "status": m.get("status"),
            "started": m.get("started"), "ended": m.get("ended"),
            "n_trials": (m.get("counts") or {}).get("n_trials"),
            "dataset": (m.get("dataset") or {}).get("name"),
            "dataset_sha256": (m.get("dataset") or {}).get("sha256"),
            "model": (m.get("model") or {}).get("id") if isinstance(m.get("model"), dict) else m.get("model"),
            "credentialed": bool(m.get("credentialed")),
            "git_commit": (prov.get("git") or {}).get("commit"),
            "git_dirty": (prov.get("git") or {}).get("dirty"),
            "path": str(path),
        })
    return pd.DataFrame(rows, columns=[
        "run_id", "protocol", "name", "spec_sha256", "status", "started", "ended", "n_trials",
        "dataset", "dataset_sha256", "model", "credentialed", "git_commit", "git_dirty", "path"])


def trials_df(run: Run | str | Path, *, with_run_id: bool = True) -> pd.DataFrame:
    """Trial rows of a record (a :class:`Run`, a record path, or ``protocol/name[/hash]``)."""
    if isinstance(run, (str, Path)) and Path(run, "manifest.json").is_file():
        run = Run(Path(run))
        _log_read(run)
    elif isinstance(run, str):
        protocol, name, *rest = run.split("/")
        run = load_run(protocol, name, rest[0] if rest else None)
    df = run.trials.copy()
    if with_run_id:
        df.insert(0, "run_id", run.run_id)
    return df
