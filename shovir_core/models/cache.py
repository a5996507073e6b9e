"""On-disk inference cache: identical model inputs are computed once, interrupted runs resume.

A result is keyed by the SHA-256 of (model identity = id + revision + settings, the exact model
input from :meth:`VLM.input_key` = rendered token ids and pixels, the task and its decoding
settings). Under ShoViR, p = 0 under RO, OCO and DOCO gives byte-identical images, so those trials
hit the baseline's entries. Results are committed chunk by chunk to one SQLite file, so a killed
run loses at most one chunk.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Sequence

import numpy as np

from .. import paths
from .protocol import VLM, Box, ScoreRequest, image_fingerprint

__all__ = ["InferenceCache", "CachedVLM", "cached", "default_cache_dir", "cache_key"]


def default_cache_dir() -> Path:
    """``<runs root>/.cache/inference`` (follows ``$SHOVIR_RUNS``)."""
    return paths.runs_root() / ".cache" / "inference"


def cache_key(identity: dict, task: str, model_input: str, settings: dict) -> str:
    """SHA-256 hex digest of one model call's full identity."""
    payload = json.dumps({"model": identity, "task": task, "input": model_input, "settings": settings},
                         sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


class InferenceCache:
    """A key -> JSON value store in ``<directory>/inference.sqlite``.

    Parameters
    ----------
    directory
        Where the database lives (created if needed); :func:`default_cache_dir` when ``None``.
    """

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "inference.sqlite"
        with self._connect() as con:
            con.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, value TEXT NOT NULL)")

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=60)

    def get_many(self, keys: Sequence[str]) -> dict[str, object]:
        """Cached values of the keys present (missing keys are absent from the result)."""
        out: dict[str, object] = {}
        unique = list(dict.fromkeys(keys))
        with self._connect() as con:
            for start in range(0, len(unique), 500):
                chunk = unique[start:start + 500]
                marks = ",".join("?" * len(chunk))
                for key, value in con.execute(f"SELECT key, value FROM results WHERE key IN ({marks})", chunk):
                    out[key] = json.loads(value)
        return out

    def put_many(self, items: dict[str, object]) -> None:
        """Store values atomically (one transaction)."""
        with self._connect() as con:
            con.executemany("INSERT OR REPLACE INTO results (key, value) VALUES (?, ?)",
                            [(k, json.dumps(v)) for k, v in items.items()])

    def __len__(self) -> int:
        with self._connect() as con:
            return int(con.execute("SELECT COUNT(*) FROM results").fetchone()[0])


class CachedVLM(VLM):
    """``model`` behind an :class:`InferenceCache`, with a progress bar of trials done and rate.

    Each score result gains ``input_hash`` (the cache key), which trial rows store as the hash of
    the exact model input.
    """

    def __init__(self, model: VLM, cache: InferenceCache, *, chunk_size: int = 128, progress: bool = True) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.model, self.cache, self.chunk_size, self.progress = model, cache, chunk_size, progress
        self.name = model.name
        self.uses_boxes = model.uses_boxes
        self.computed = 0
        """Number of model calls (unique inputs) computed, not read from the cache, by this wrapper."""

    def identity(self) -> dict:
        return self.model.identity()

    def provenance(self) -> dict:
        return {**self.model.provenance(), "inference_cache": str(self.cache.path)}

    def input_key(self, request=None, *, image=None, prompt=None) -> str:
        return self.model.input_key(request, image=image, prompt=prompt)

    def _run(self, keys: list[str], compute, desc: str, unit: str) -> list:
        from tqdm import tqdm

        found = self.cache.get_many(keys)
        todo: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            if key not in found:
                todo.setdefault(key, []).append(i)
        done = sum(1 for k in keys if k in found)
        pending = list(todo)
        with tqdm(total=len(keys), initial=done, desc=f"{self.name} {desc}", unit=unit,
                  disable=not self.progress, dynamic_ncols=True) as bar:
            for start in range(0, len(pending), self.chunk_size):
                chunk = pending[start:start + self.chunk_size]
                values = compute([todo[k][0] for k in chunk])
                new = dict(zip(chunk, values))
                self.cache.put_many(new)
                found.update(new)
                self.computed += len(chunk)
                bar.update(sum(len(todo[k]) for k in chunk))
        return [found[k] for k in keys]

    def score_yes_no(self, requests: Sequence[ScoreRequest], *, answer_tokens: int = 0) -> list[dict]:
        requests = list(requests)
        identity = self.model.identity()
        keys = [cache_key(identity, "score_yes_no", self.model.input_key(r), {"answer_tokens": answer_tokens,
                                                                               "greedy": True}) for r in requests]
        values = self._run(keys, lambda idx: self.model.score_yes_no([requests[i] for i in idx],
                                                                     answer_tokens=answer_tokens),
                           "score", "trial")
        return [{**v, "input_hash": k} for v, k in zip(values, keys)]

    def vision_embedding(self, images) -> list[np.ndarray]:
        """The wrapped model's :meth:`~shovir_core.models.protocol.VLM.vision_embedding`, computed once per
        distinct image (keyed by the model identity and the pixels' fingerprint)."""
        images = list(images)
        identity = self.model.identity()
        keys = [cache_key(identity, "vision_embedding", image_fingerprint(image), {"pool": "mean"})
                for image in images]

        def compute(idx):
            return [np.asarray(v, dtype=float).tolist() for v in self.model.vision_embedding([images[i] for i in idx])]

        return [np.asarray(v, dtype=float) for v in self._run(keys, compute, "embed", "image")]

    def generate_reports(self, images, *, prompt: str | None = None, max_new_tokens: int | None = None,
                         boxes: Sequence[Sequence[Box]] | None = None) -> list[str]:
        images = list(images)
        if boxes is not None and len(boxes) != len(images):
            raise ValueError(f"{self.name}: {len(images)} images but {len(boxes)} box lists")
        identity = self.model.identity()
        keys = []
        for i, image in enumerate(images):
            settings = {"max_new_tokens": max_new_tokens,
                        "boxes": [list(b) for b in boxes[i]] if (boxes is not None and self.uses_boxes) else None}
            keys.append(cache_key(identity, "generate_reports", self.model.input_key(image=image, prompt=prompt),
                                  settings))

        def compute(idx):
            return self.model.generate_reports([images[i] for i in idx], prompt=prompt, max_new_tokens=max_new_tokens,
                                               boxes=None if boxes is None else [boxes[i] for i in idx])

        return self._run(keys, compute, "reports", "image")


def cached(model: VLM, *, directory: str | Path | None = None, chunk_size: int = 128,
           progress: bool = True) -> CachedVLM:
    """Wrap ``model`` in the on-disk inference cache (``default_cache_dir()`` unless ``directory``)."""
    return CachedVLM(model, InferenceCache(directory), chunk_size=chunk_size, progress=progress)
