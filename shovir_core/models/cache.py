"""On-disk inference cache: identical model inputs are computed once, interrupted runs resume.

A result is keyed by the SHA-256 of (model identity = id + revision + settings, the exact model
input from :meth:`VLM.input_key` = rendered token ids and pixels, the task and its decoding
settings). Under ShoViR, p = 0 under RO, OCO and DOCO gives byte-identical images, so those trials
hit the baseline's entries. Results are committed chunk by chunk to one SQLite file, so a killed
run loses at most one chunk. A :class:`CachedVLM` that makes a record's trials
(:meth:`CachedVLM.record_into`) commits its new entries when the record's writer is about to append
trials (and at least every :data:`DEFER_MAX_ROWS` entries or :data:`DEFER_MAX_SECONDS`), not after
every model call: a full-scale ShoViR record made ~10,000 calls of a few images each, and their
commits (each an fsync) took 112 of its 695 profiled seconds. Trials are never written before the
entries they were made from, so a killed run still loses only results it had not written.

Every entry is sealed: it stores the JSON of its key's inputs (whose SHA-256 is the key) and
``entry_sha256``, the SHA-256 of ``key + "\n" + value``. A read checks both, so an edited value,
an edited input or two swapped values are refused with a :class:`CacheError` naming the cache
file, the entry and the command that evicts it (``shovir cache verify --evict``; ``shovir cache
clear [--model M]``). Entries written before the seal existed are sealed as they are when the
cache is first opened by this version (their key inputs are unknown). A damaged or truncated
SQLite file, or a file that is not one, gives a one-line :class:`CacheError` naming it.

A :class:`CachedVLM` attached to a record's writer (:meth:`CachedVLM.record_into`) notes every
entry it served; the completed record lists them with their seals in ``cache_entries.json``
(its hash in the manifest's ``inference_cache``), and :func:`record_cache_problem` (run by
``shovir records verify``) names a record made from entries that have since changed.
"""
from __future__ import annotations

import atexit
import functools
import hashlib
import json
import sqlite3
import sys
import time
import weakref
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Sequence

import numpy as np

from .. import paths
from ..errors import ShovirError
from .protocol import VLM, Box, ScoreRequest, image_fingerprint

__all__ = ["InferenceCache", "CachedVLM", "cached", "default_cache_dir", "cache_key", "cache_inputs", "cache_inputs_many",
           "CacheError", "entry_sha256", "record_cache_problem", "CACHE_ENTRIES_FILE"]

CACHE_ENTRIES_FILE = "cache_entries.json"
"""``<record>/cache_entries.json``: ``{"file": cache path, "entries": {key: entry_sha256}}`` of a completed record."""

EVICT_HINT = "`shovir cache verify --evict` removes the damaged entries (or `shovir cache clear [--model M]`)"


class CacheError(ShovirError, RuntimeError):
    """The inference cache is damaged or one of its entries does not match its seal."""


def entry_sha256(key: str, value_json: str) -> str:
    """The seal of one entry: SHA-256 of ``key + "\n" + value_json``."""
    return hashlib.sha256(f"{key}\n{value_json}".encode()).hexdigest()


def default_cache_dir() -> Path:
    """``<runs root>/.cache/inference`` (follows ``$SHOVIR_RUNS``)."""
    return paths.runs_root() / ".cache" / "inference"


def cache_inputs(identity: dict, task: str, model_input: str, settings: dict) -> str:
    """The JSON of one model call's full identity (the key's inputs, stored with the entry):
    ``json.dumps({"model": identity, "task": task, "input": model_input, "settings": settings},
    sort_keys=True, default=str)``.

    >>> cache_inputs({"name": "m", "sha": {"b": 1, "a": 2}}, "t", "x", {"greedy": True})
    '{"input": "x", "model": {"name": "m", "sha": {"a": 2, "b": 1}}, "settings": {"greedy": true}, "task": "t"}'
    """
    return cache_inputs_many(identity, task, [model_input], settings)[0]


def cache_inputs_many(identity: dict, task: str, model_inputs, settings: dict) -> list[str]:
    """:func:`cache_inputs` of each of ``model_inputs`` with one identity, task and settings, the identity (a
    nested dict of fingerprints) serialised once instead of once per call."""
    # json.dumps is compositional: with the same options a nested value is written as it is on its own, and
    # sort_keys puts the four keys in the order input, model, settings, task (tests/test_models_cache.py holds
    # the strings to json.dumps of the whole dict)
    dump = functools.partial(json.dumps, sort_keys=True, default=str)
    middle = f', "model": {dump(identity)}, "settings": {dump(settings)}, "task": {dump(task)}}}'
    return ['{"input": ' + dump(model_input) + middle for model_input in model_inputs]


def cache_key(identity: dict, task: str, model_input: str, settings: dict) -> str:
    """SHA-256 hex digest of one model call's full identity (:func:`cache_inputs`)."""
    return hashlib.sha256(cache_inputs(identity, task, model_input, settings).encode()).hexdigest()


def _model_of(inputs: str | None) -> str | None:
    if not inputs:
        return None
    model = json.loads(inputs).get("model") or {}
    return str(model.get("id") or model.get("name") or "") or None


DEFER_MAX_ROWS = 4096
"""Deferred entries (:meth:`InferenceCache.put_many` with ``defer``) are committed at this many at the latest."""

DEFER_MAX_SECONDS = 30.0
"""... or when the oldest of them has waited this long."""

_OPEN_CACHES: "weakref.WeakSet[InferenceCache]" = weakref.WeakSet()


@atexit.register
def _flush_open_caches() -> None:  # a process that ends normally keeps what it computed
    for cache in list(_OPEN_CACHES):
        try:
            cache.flush()
        except Exception as exc:  # noqa: BLE001 - said, not raised: the entries are only computed again
            print(f"shovir: {len(cache._pending)} inference-cache entries not kept in {cache.path} "
                  f"({type(exc).__name__}: {exc}); they are computed again when needed", file=sys.stderr)


_COLUMNS = ("inputs", "entry_sha256", "model")
"""The columns beside ``key`` and ``value`` (added to a file of an older version when it is opened)."""

_UNSEALED_INDEX = "CREATE INDEX IF NOT EXISTS results_unsealed ON results(key) WHERE entry_sha256 IS NULL"
"""The entries without a seal (none but an older version's): a partial index, so finding them reads no table."""


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
        self._pending: dict[str, tuple] = {}  # key -> row of an entry stored but not committed yet
        self._pending_since: float | None = None
        _OPEN_CACHES.add(self)
        with self._db() as con:
            if not self._schema_current(con):
                # one writer at a time through the schema: shards opening a new or older file together would
                # otherwise each see the other's half-made table (two upgrades raced to "duplicate column name")
                con.execute("BEGIN IMMEDIATE")
                con.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, value TEXT NOT NULL, "
                            "inputs TEXT, entry_sha256 TEXT, model TEXT)")
                columns = {row[1] for row in con.execute("PRAGMA table_info(results)")}
                for column in _COLUMNS:
                    if column not in columns:
                        con.execute(f"ALTER TABLE results ADD COLUMN {column} TEXT")
                con.execute(_UNSEALED_INDEX)
                unsealed = con.execute("SELECT key, value FROM results WHERE entry_sha256 IS NULL").fetchall()
                if unsealed:  # entries of an older version: sealed as they are (their key inputs are unknown)
                    con.executemany("UPDATE results SET entry_sha256 = ? WHERE key = ?",
                                    [(entry_sha256(k, v), k) for k, v in unsealed])

    @staticmethod
    def _schema_current(con) -> bool:
        """Whether the file already has this version's table and index with every entry sealed (then opening it
        takes no write lock and writes nothing). The unsealed entries are looked up in their partial index, which
        holds none in a current file: without it the lookup read the whole table (0.28 s for the demo book's
        250,000 entries, at each of its ~75 opens)."""
        columns = {row[1] for row in con.execute("PRAGMA table_info(results)")}
        if not columns >= {"key", "value", *_COLUMNS}:
            return False
        if con.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'results_unsealed'").fetchone() is None:
            return False
        return con.execute("SELECT 1 FROM results WHERE entry_sha256 IS NULL LIMIT 1").fetchone() is None

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=60)

    @contextmanager
    def _db(self):
        """A connection (committed on success); a damaged file becomes one :class:`CacheError` naming it."""
        try:
            with closing(self._connect()) as con, con:
                yield con
        except sqlite3.DatabaseError as exc:
            raise CacheError(f"{self.path}: not a readable inference cache ({exc}); `shovir cache clear` removes "
                             "it (its results are computed again)") from None

    def _check(self, key: str, value: str, inputs: str | None, seal: str | None) -> None:
        where = f"{self.path}: entry {key}"
        if seal != entry_sha256(key, value):
            raise CacheError(f"{where} ({_model_of(inputs) or 'model unknown'}) does not match its seal: its value was "
                             f"edited or damaged; {EVICT_HINT}")
        if inputs is not None and hashlib.sha256(inputs.encode()).hexdigest() != key:
            raise CacheError(f"{where}: its stored key inputs do not hash to its key (edited); {EVICT_HINT}")

    def get_many(self, keys: Sequence[str]) -> dict[str, object]:
        """Cached values of the keys present (missing keys are absent from the result), each checked
        against its seal (:class:`CacheError` on a mismatch)."""
        return {k: v for k, (v, _) in self.get_sealed(keys).items()}

    def get_sealed(self, keys: Sequence[str]) -> dict[str, tuple[object, str]]:
        """``{key: (value, entry_sha256)}`` of the keys present, checked like :meth:`get_many`."""
        out: dict[str, tuple[object, str]] = {}
        unique = []
        for key in dict.fromkeys(keys):
            row = self._pending.get(key)
            if row is None:
                unique.append(key)
            else:
                out[key] = (json.loads(row[1]), row[3])
        if not unique:
            return out
        with self._db() as con:
            for start in range(0, len(unique), 500):
                chunk = unique[start:start + 500]
                marks = ",".join("?" * len(chunk))
                for key, value, inputs, seal in con.execute(
                        f"SELECT key, value, inputs, entry_sha256 FROM results WHERE key IN ({marks})", chunk):
                    self._check(key, value, inputs, seal)
                    out[key] = (json.loads(value), seal)
        return out

    def seals(self, keys: Sequence[str]) -> dict[str, str]:
        """``{key: entry_sha256}`` as stored (no check), for the keys present."""
        self.flush()
        out: dict[str, str] = {}
        unique = list(dict.fromkeys(keys))
        with self._db() as con:
            for start in range(0, len(unique), 500):
                chunk = unique[start:start + 500]
                marks = ",".join("?" * len(chunk))
                out.update(con.execute(f"SELECT key, entry_sha256 FROM results WHERE key IN ({marks})", chunk))
        return out

    def put_many(self, items: dict[str, object], inputs: dict[str, str] | None = None, *,
                 defer: bool = False) -> dict[str, str]:
        """Store values atomically (one transaction), sealed; ``inputs``: each key's :func:`cache_inputs`.

        With ``defer`` the entries are held (and served by :meth:`get_sealed`) until :meth:`flush`, which
        commits them in one transaction; at the latest when :data:`DEFER_MAX_ROWS` are held or the oldest
        has waited :data:`DEFER_MAX_SECONDS`, and when the process ends normally. Returns ``{key: entry_sha256}``.
        """
        inputs = inputs or {}
        rows, seals = [], {}
        for k, v in items.items():
            text = json.dumps(v)
            seals[k] = entry_sha256(k, text)
            rows.append((k, text, inputs.get(k), seals[k], _model_of(inputs.get(k))))
        if not defer:
            self._write(rows)
            return seals
        self._pending.update((row[0], row) for row in rows)
        if self._pending_since is None:
            self._pending_since = time.monotonic()
        if len(self._pending) >= DEFER_MAX_ROWS or time.monotonic() - self._pending_since >= DEFER_MAX_SECONDS:
            self.flush()
        return seals

    def flush(self) -> None:
        """Commit the deferred entries (:meth:`put_many`) in one transaction."""
        if self._pending:
            self._write(list(self._pending.values()))
        self._pending.clear()
        self._pending_since = None

    def _write(self, rows: list[tuple]) -> None:
        with self._db() as con:
            con.executemany("INSERT OR REPLACE INTO results (key, value, inputs, entry_sha256, model) "
                            "VALUES (?, ?, ?, ?, ?)", rows)

    def verify(self, *, evict: bool = False) -> list[str]:
        """One line per entry that does not match its seal (removed with ``evict``)."""
        self.flush()
        bad, lines = [], []
        with self._db() as con:
            for key, value, inputs, seal in con.execute("SELECT key, value, inputs, entry_sha256 FROM results"):
                try:
                    self._check(key, value, inputs, seal)
                except CacheError as exc:
                    bad.append(key)
                    lines.append(str(exc))
            if evict and bad:
                con.executemany("DELETE FROM results WHERE key = ?", [(k,) for k in bad])
        return lines

    def clear(self, *, model: str | None = None) -> int:
        """Remove every entry (or those of ``model``: its id or name); returns how many."""
        self.flush()
        with self._db() as con:
            if model is None:
                n = int(con.execute("SELECT COUNT(*) FROM results").fetchone()[0])
                con.execute("DELETE FROM results")
                return n
            return con.execute("DELETE FROM results WHERE model = ?", (model,)).rowcount

    def models(self) -> dict[str | None, int]:
        """Entries per model (``None``: entries made before the model was stored)."""
        self.flush()
        with self._db() as con:
            return dict(con.execute("SELECT model, COUNT(*) FROM results GROUP BY model"))

    def __len__(self) -> int:
        self.flush()
        with self._db() as con:
            return int(con.execute("SELECT COUNT(*) FROM results").fetchone()[0])


def _input_keys(model, requests) -> list[str]:
    """``model.input_keys(requests)``, or its :meth:`input_key` one request at a time where a wrapped model
    that is no :class:`~shovir_core.models.protocol.VLM` (duck-typed) has no batched form."""
    batched = getattr(model, "input_keys", None)
    return list(batched(requests)) if batched is not None else [model.input_key(r) for r in requests]


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
        self.used: dict[str, str] = {}
        """``{key: entry_sha256}`` of every entry this wrapper served (read or computed)."""
        self._writer = None

    def record_into(self, writer) -> None:
        """Note the entries served from now on in ``writer``'s record (:meth:`RunWriter.note_cache_entries`);
        new entries are committed when ``writer`` is about to write trials (:meth:`InferenceCache.put_many`'s
        ``defer``; :meth:`RunWriter.before_writing`)."""
        self._writer = writer
        writer.before_writing(self.cache.flush)

    def identity(self) -> dict:
        return self.model.identity()

    def provenance(self) -> dict:
        return {**self.model.provenance(), "inference_cache": str(self.cache.path)}

    def input_key(self, request=None, *, image=None, prompt=None) -> str:
        return self.model.input_key(request, image=image, prompt=prompt)

    def input_keys(self, requests) -> list[str]:
        return _input_keys(self.model, requests)

    def _run(self, keys: list[str], compute, desc: str, unit: str, inputs: dict[str, str] | None = None) -> list:
        from tqdm import tqdm

        sealed = self.cache.get_sealed(keys)
        found = {k: v for k, (v, _) in sealed.items()}
        seals = {k: h for k, (_, h) in sealed.items()}
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
                seals.update(self.cache.put_many(new, inputs, defer=self._writer is not None))
                found.update(new)
                self.computed += len(chunk)
                bar.update(sum(len(todo[k]) for k in chunk))
        used = {k: seals[k] for k in dict.fromkeys(keys)}
        self.used.update(used)
        if self._writer is not None:
            self._writer.note_cache_entries(str(self.cache.path), used)
        return [found[k] for k in keys]

    def score_yes_no(self, requests: Sequence[ScoreRequest], *, answer_tokens: int = 0) -> list[dict]:
        requests = list(requests)
        identity = self.model.identity()
        payloads = cache_inputs_many(identity, "score_yes_no", _input_keys(self.model, requests),
                                     {"answer_tokens": answer_tokens, "greedy": True})
        keys, inputs = _keyed(payloads)
        values = self._run(keys, lambda idx: self.model.score_yes_no([requests[i] for i in idx],
                                                                     answer_tokens=answer_tokens),
                           "score", "trial", inputs)
        return [{**v, "input_hash": k} for v, k in zip(values, keys)]

    def vision_embedding(self, images) -> list[np.ndarray]:
        """The wrapped model's :meth:`~shovir_core.models.protocol.VLM.vision_embedding`, computed once per
        distinct image (keyed by the model identity and the pixels' fingerprint)."""
        images = list(images)
        identity = self.model.identity()
        keys, inputs = _keyed([cache_inputs(identity, "vision_embedding", image_fingerprint(image), {"pool": "mean"})
                               for image in images])

        def compute(idx):
            return [np.asarray(v, dtype=float).tolist() for v in self.model.vision_embedding([images[i] for i in idx])]

        return [np.asarray(v, dtype=float) for v in self._run(keys, compute, "embed", "image", inputs)]

    def generate_reports(self, images, *, prompt: str | None = None, max_new_tokens: int | None = None,
                         boxes: Sequence[Sequence[Box]] | None = None) -> list[str]:
        images = list(images)
        if boxes is not None and len(boxes) != len(images):
            raise ValueError(f"{self.name}: {len(images)} images but {len(boxes)} box lists")
        identity = self.model.identity()
        payloads = []
        for i, image in enumerate(images):
            settings = {"max_new_tokens": max_new_tokens,
                        "boxes": [list(b) for b in boxes[i]] if (boxes is not None and self.uses_boxes) else None}
            payloads.append(cache_inputs(identity, "generate_reports", self.model.input_key(image=image, prompt=prompt),
                                         settings))
        keys, inputs = _keyed(payloads)

        def compute(idx):
            return self.model.generate_reports([images[i] for i in idx], prompt=prompt, max_new_tokens=max_new_tokens,
                                               boxes=None if boxes is None else [boxes[i] for i in idx])

        return self._run(keys, compute, "reports", "image", inputs)


def _keyed(payloads: list[str]) -> tuple[list[str], dict[str, str]]:
    keys = [hashlib.sha256(p.encode()).hexdigest() for p in payloads]
    return keys, dict(zip(keys, payloads))


def cached(model: VLM, *, directory: str | Path | None = None, chunk_size: int = 128,
           progress: bool = True) -> CachedVLM:
    """Wrap ``model`` in the on-disk inference cache (``default_cache_dir()`` unless ``directory``)."""
    return CachedVLM(model, InferenceCache(directory), chunk_size=chunk_size, progress=progress)


def record_cache_problem(record_path: str | Path, manifest: dict) -> str | None:
    """What changed in the inference cache since ``record`` was made from it (``None``: nothing).

    Reads the record's ``cache_entries.json`` (checked against the manifest's ``inference_cache``)
    and compares each entry's seal with the cache's current one; entries evicted since are not a
    change. Used by ``shovir records verify``.
    """
    info = manifest.get("inference_cache")
    if not info:
        return None
    path = Path(record_path) / CACHE_ENTRIES_FILE
    if not path.is_file():
        return f"{record_path}: {CACHE_ENTRIES_FILE} (the inference-cache entries it was made from) is missing"
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != info.get("sha256"):
        return f"{record_path}: {CACHE_ENTRIES_FILE} does not match the manifest's inference_cache.sha256 (edited)"
    entries = json.loads(data)
    problems = []
    for cache_file, seals in entries.get("files", {}).items():
        if not Path(cache_file).is_file():
            continue
        cache = InferenceCache(Path(cache_file).parent)
        now = cache.seals(list(seals))
        changed = sorted(k for k, h in now.items() if h != seals[k])
        if changed:
            problems.append(f"{len(changed)} of the {len(seals)} inference-cache entries it was made from changed "
                            f"since in {cache_file} (first: entry {changed[0]}); remake the record from the cache "
                            "as it is now, or `shovir cache verify` to check the cache")
    return f"{record_path}: " + "; ".join(problems) if problems else None
