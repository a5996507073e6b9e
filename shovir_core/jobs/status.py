"""Per-shard progress of records, read from the records themselves (``shovir jobs status``)."""
from __future__ import annotations

import pandas as pd

from ..records import Run, record_dir, shard_progress
from .task import RunTarget

__all__ = ["status", "STATUS_COLUMNS"]

STATUS_COLUMNS = ["run_id", "record", "shard", "status", "planned", "staged", "written", "host", "pid", "updated",
                  "error", "log"]


def _record_path(t: RunTarget):
    from ..protocols import resolve

    return record_dir(t.protocol, t.name, resolve(t.protocol, t.spec))


def status(targets: list[RunTarget]) -> pd.DataFrame:
    """One row per (record, shard): the record's status, the shard's planned, staged (computed, written when
    the record's probes are fitted: App. N.3's test split) and written trials,
    who wrote it last, its error and log path. Records not started yet show one row; a record that
    cannot be read (e.g. Permission denied on one of its files) shows one row ``unreadable`` with the
    error, and the other records are listed as usual."""
    rows = []
    for t in targets:
        path = _record_path(t)
        run_id = f"{t.protocol}/{t.name}/{path.name}"
        if not (path / "manifest.json").is_file():
            rows.append({"run_id": run_id, "record": "not started"})
            continue
        run = Run(path)
        try:
            record_status = run.status if run.problem is None else "BAD"
            shards = shard_progress(path)
            if not shards:
                rows.append({"run_id": run_id, "record": record_status, "written": run.n_rows_present()})
        except OSError as exc:  # e.g. Permission denied on one file: say so on this record's row, list the rest
            rows.append({"run_id": run_id, "record": "unreadable", "error": f"{type(exc).__name__}: {exc}"})
            continue
        for s in shards:
            rows.append({"run_id": run_id, "record": record_status, **s})
    return pd.DataFrame(rows, columns=STATUS_COLUMNS)
