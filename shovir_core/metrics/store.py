"""Per-sample scores of the model-based metrics, cached beside a run record.

RadGraph F1 and GREEN cost GPU time; a record's scores are computed once and read back on every
later render. They live in the record's folder, apart from its trial parts:
``<record>/scores/<metric>/<version>/part-<uuid>.parquet``, rows ``hyp_sha256, ref_sha256, value``
keyed by the SHA-256 of the generated and the reference report text and by the metric version
(:func:`~shovir_core.metrics.external.metric_version`: package, version, settings, weights
fingerprint). Parts are written atomically (temporary file, then rename) and only added, so
concurrent renders at worst compute a pair twice. No text is stored, only hashes and numbers.
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from .external import MetricResult, metric_version

__all__ = ["ScoreStore", "text_sha256", "scores_with_store", "SCORES_DIR"]

SCORES_DIR = "scores"


def text_sha256(text: str) -> str:
    """SHA-256 of a report's UTF-8 text (the cache key of one side of a pair)."""
    return hashlib.sha256(str(text).encode("utf-8")).hexdigest()


class ScoreStore:
    """The score cache of one record folder (``record`` is a path or a :class:`~shovir_core.records.Run`)."""

    def __init__(self, record) -> None:
        self.root = Path(getattr(record, "path", record)) / SCORES_DIR

    def versions(self, metric: str) -> list[str]:
        """Version ids with cached scores for ``metric``, most recently written first."""
        base = self.root / metric
        if not base.is_dir():
            return []
        dirs = [d for d in base.iterdir() if d.is_dir() and any(d.glob("part-*.parquet"))]
        return [d.name for d in sorted(dirs, key=lambda d: max(p.stat().st_mtime for p in d.glob("part-*.parquet")),
                                       reverse=True)]

    def describe(self, metric: str, version: str) -> dict:
        f = self.root / metric / version / "version.json"
        return json.loads(f.read_text()) if f.is_file() else {}

    def lookup(self, metric: str, version: str) -> dict[tuple[str, str], float]:
        """``{(hyp_sha256, ref_sha256): value}`` cached under one version."""
        parts = sorted((self.root / metric / version).glob("part-*.parquet"))
        if not parts:
            return {}
        frame = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
        return dict(zip(zip(frame["hyp_sha256"], frame["ref_sha256"]), frame["value"].astype(float)))

    def add(self, metric: str, version: str, description: dict, keys: Sequence[tuple[str, str]],
            values: Sequence[float]) -> Path:
        """Write one part of scores (atomically) and the version's description."""
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys but {len(values)} values")
        folder = self.root / metric / version
        folder.mkdir(parents=True, exist_ok=True)
        desc = folder / "version.json"
        if not desc.is_file():
            tmp = folder / f".version-{uuid.uuid4().hex}.json"
            tmp.write_text(json.dumps(description, sort_keys=True, indent=1))
            os.replace(tmp, desc)
        frame = pd.DataFrame({"hyp_sha256": [k[0] for k in keys], "ref_sha256": [k[1] for k in keys],
                              "value": np.asarray(values, dtype=float)})
        name = f"part-{uuid.uuid4().hex}.parquet"
        tmp = folder / f".{name}.tmp"
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, folder / name)
        return folder / name


def scores_with_store(name: str, hyps: list[str], refs: list[str], *, store: ScoreStore, available: bool,
                      reason: str, weights: Path | None,
                      adapter: Callable[[list[str], list[str], Path], tuple[float, np.ndarray | None]]) -> MetricResult:
    """Per-sample scores of the pairs, from ``store`` where cached, computed (and added) otherwise."""
    keys = [(text_sha256(h), text_sha256(r)) for h, r in zip(hyps, refs)]
    if not keys:
        raise ValueError("no hypothesis/reference pairs")

    def result(values: dict, version: str, source: str, note: str = "") -> MetricResult:
        per = np.array([values[k] for k in keys], dtype=float)
        return MetricResult(name=name, available=True, value=float(per.mean()), per_sample=per, reason=note,
                            version=version, source=source)

    if available:
        version, desc = metric_version(name, weights)
        cached = store.lookup(name, version)
        missing = list(dict.fromkeys(k for k in keys if k not in cached))
        if not missing:
            return result(cached, version, "cache")
        first = {k: i for i, k in reversed(list(enumerate(keys)))}
        todo = [first[k] for k in missing]
        _, per = adapter([hyps[i] for i in todo], [refs[i] for i in todo], weights)
        per = np.asarray(per, dtype=float)
        if per.shape != (len(todo),):
            raise ValueError(f"{name}: the adapter returned {per.shape} per-sample scores for {len(todo)} pairs")
        store.add(name, version, desc, missing, per.tolist())
        cached.update(zip(missing, per.tolist()))
        return result(cached, version, "cache+computed" if len(missing) < len(set(keys)) else "computed")
    best = (0, None)
    for version in store.versions(name):
        cached = store.lookup(name, version)
        n = sum(k in cached for k in set(keys))
        if n == len(set(keys)):
            return result(cached, version, "cache", note=f"read from the record's cache ({reason} here)")
        best = max(best, (n, version), key=lambda t: t[0])
    extra = f"; {best[0]} of {len(set(keys))} pairs are cached (version {best[1]})" if best[0] else ""
    return MetricResult(name=name, available=False, reason=reason + extra)
