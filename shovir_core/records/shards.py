"""Shards of one record: several processes (e.g. one SLURM array task per GPU) make one record.

Shard ``i`` of ``n`` writes its own part files (``part-s<i>of<n>-NNNNNN.parquet``) and one marker
``shards/s<i>of<n>.json`` saying what it planned, who is writing it and whether it finished. A
record completes when, for some ``n``, every shard ``0 .. n-1`` has finished (the last shard to
finish completes it; :func:`shovir_core.records.RunWriter.complete`). Which trials belong to
which shard is the protocol's choice (:mod:`shovir_core.protocols.shards`); the record only
counts and checks.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from ..errors import UsageError
from .files import HOST, PART_RE, TryLock, atomic_write_text, part_files

__all__ = ["Shard", "read_markers", "write_marker", "finished_set", "shard_progress", "MARKER_DIR"]

MARKER_DIR = "shards"
_TOKEN = re.compile(r"^s(\d+)of(\d+)$")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (``Shard(0, 1)`` is the whole grid in one process)."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not (isinstance(self.count, int) and isinstance(self.index, int)) or self.count < 1 \
                or not 0 <= self.index < self.count:
            raise UsageError(f"shard {self.index!r} of {self.count!r}: need 0 <= index < count and count >= 1")

    @classmethod
    def parse(cls, text: str) -> "Shard":
        """``"1/3"`` -> ``Shard(1, 3)``."""
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
        if not m:
            raise UsageError(f"shard {text!r}: write it as INDEX/COUNT, e.g. 0/3")
        return cls(int(m.group(1)), int(m.group(2)))

    @classmethod
    def from_token(cls, token: str) -> "Shard":
        m = _TOKEN.match(token)
        if not m:
            raise UsageError(f"not a shard token: {token!r}")
        return cls(int(m.group(1)), int(m.group(2)))

    @property
    def sharded(self) -> bool:
        return self.count > 1

    @property
    def token(self) -> str | None:
        """``s<index>of<count>`` (zero-padded), or ``None`` for the single-process writer."""
        return f"s{self.index:03d}of{self.count:03d}" if self.sharded else None

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def read_markers(record: Path) -> dict[str, dict]:
    """token -> marker of every shard marker of a record (unreadable markers are reported as such)."""
    out = {}
    folder = record / MARKER_DIR
    if not folder.is_dir():
        return out
    for path in sorted(folder.glob("s*of*.json")):
        token = path.stem
        if not _TOKEN.match(token):
            continue
        try:
            out[token] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            out[token] = {"status": "unreadable", "error": f"{path}: {exc}"}
    return out


def write_marker(record: Path, shard: Shard, **fields) -> dict:
    """Update shard ``shard``'s marker with ``fields`` (call under the record's manifest lock)."""
    path = record / MARKER_DIR / f"{shard.token}.json"
    marker = {}
    if path.is_file():
        try:
            marker = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            marker = {}
    marker.update({"shard": shard.index, "of": shard.count, "host": HOST, "pid": os.getpid(),
                   "updated": _now(), **fields})
    log = os.environ.get("SHOVIR_JOB_LOG")
    if log:
        marker["log"] = log
    atomic_write_text(path, json.dumps(marker, indent=1, sort_keys=True) + "\n")
    return marker


def finished_set(markers: dict[str, dict]) -> int | None:
    """The shard count ``n`` whose shards ``0 .. n-1`` have all finished, if any (smallest such n)."""
    done: dict[int, set[int]] = {}
    for token, marker in markers.items():
        if marker.get("status") == "done":
            s = Shard.from_token(token)
            done.setdefault(s.count, set()).add(s.index)
    complete = [n for n, idx in done.items() if idx == set(range(n))]
    return min(complete) if complete else None


def shard_progress(record: Path) -> list[dict]:
    """One row per shard of a record: planned trials, trials staged (computed, not yet written: a probe
    record's test split), rows written in its parts, status, host, log.

    Status is the marker's (``running``, ``done``, ``failed``), or ``stopped`` for a shard marked
    running whose writer holds no lock any more (its process died).

    Rows written are counted from the part files' Parquet footers (no data is read). Parts written
    by a single-process run appear as shard ``-``.
    """
    written: dict[str | None, int] = {}
    for part in part_files(record / "parts"):
        token = PART_RE.match(part.name).group("token")
        try:
            n = pq.read_metadata(part).num_rows
        except Exception:  # noqa: BLE001 - a damaged part shows as unreadable in `records verify`
            n = 0
        written[token] = written.get(token, 0) + n
    rows = []
    markers = read_markers(record)
    for token, marker in markers.items():
        state = marker.get("status")
        if state == "running" and TryLock(record / f".writer-{token}.lock").held_elsewhere() is None:
            state = "stopped"  # its process died without a word (killed, node lost): resubmit it
        rows.append({"shard": f"{marker.get('shard')}/{marker.get('of')}", "status": state,
                     "planned": marker.get("planned"), "staged": marker.get("staged"),
                     "written": written.pop(token, 0),
                     "host": marker.get("host"), "pid": marker.get("pid"), "updated": marker.get("updated"),
                     "error": marker.get("error"), "log": marker.get("log")})
    for token, n in written.items():
        rows.append({"shard": "-" if token is None else str(Shard.from_token(token)), "status": None,
                     "planned": None, "staged": None, "written": n, "host": None, "pid": None, "updated": None,
                     "error": None, "log": None})
    return rows
