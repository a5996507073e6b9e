"""A record's staged chunks: work of a phase whose trials can only be written when the whole phase is done.

Most protocols write each chunk of trials as soon as it is computed, so a killed run resumes from its
parts. A few cannot: App. N.3's probe record fits its probes on the features of the *whole* test split
before any test trial has its scores (:mod:`shovir_core.protocols.modalens_probes`), and at the paper's
scale that phase is most of the record's GPU time. Its chunks are staged here instead, one pair of files
per chunk under ``<record>/.staged/<phase>/``: the chunk's rows (Parquet) and its arrays (``.npz``, no
pickles). A resumed run reads the chunks it finds and computes only the others. A steering record
(:mod:`shovir_core.protocols.modalens_interventions`) stages the fit of its direction the same way, so its
shards share that fit and every one of them steers along the same direction.

* A chunk is keyed by the SHA-256 of its trial ids, and its rows must hold exactly those ids when read.
* Its arrays are written first and its rows last, each through a temporary file renamed into place, so
  a chunk whose rows exist is whole; a chunk that cannot be read is computed again.
* Shards of the record stage their chunks side by side; :meth:`Stage.lock` gives the locks that keep two
  processes from computing one chunk and let exactly one go on from the whole phase.
* The phase's name carries what decides the staged values beyond the record's own spec (the probe
  record: its frozen protocol's hash), so a changed configuration never reads another's chunks.
* Like a partial record's parts, staged chunks outlive neither the record's spec (another spec is
  another record) nor its completion: :meth:`shovir_core.records.RunWriter.complete` removes
  ``.staged/``.
"""
from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from .files import TryLock, atomic_write_bytes

__all__ = ["Stage", "STAGE_DIR"]

STAGE_DIR = ".staged"
"""``<record>/.staged/``: staged chunks of an open record (removed when it completes)."""


class Stage:
    """The staged chunks of one phase of the record at ``record`` (``<record>/.staged/<phase>/``).

    >>> import tempfile, pandas as pd
    >>> stage = Stage(Path(tempfile.mkdtemp()), "test-features")
    >>> rows = pd.DataFrame({"trial_id": ["a", "b"], "x": [1.0, 2.0]})
    >>> stage.load(["a", "b"]) is None
    True
    >>> stage.save(rows, {"f": np.arange(4.0).reshape(2, 2)})
    >>> got, arrays = stage.load(["b", "a"])
    >>> got.equals(rows), arrays["f"].tolist(), stage.has(Stage.key(["a", "b"]))
    (True, [[0.0, 1.0], [2.0, 3.0]], True)
    """

    def __init__(self, record: Path, phase: str) -> None:
        self.folder = Path(record) / STAGE_DIR / phase

    @staticmethod
    def key(trial_ids: Iterable[str]) -> str:
        """SHA-256 (first 24 hex digits) of a chunk's sorted trial ids."""
        return hashlib.sha256("\n".join(sorted(map(str, trial_ids))).encode()).hexdigest()[:24]

    def has(self, key: str) -> bool:
        """Whether the chunk of :meth:`key` ``key`` is staged (its rows, written last, exist)."""
        return (self.folder / f"{key}.parquet").is_file()

    def lock(self, name: str) -> TryLock:
        """A non-blocking lock of this phase (``<phase>/.<name>.lock``): the one process that goes on
        from the staged chunks (the probe record: fits and writes) holds it."""
        return TryLock(self.folder / f".{name}.lock")

    def run_claimed(self, key: str, compute: Callable[[], object]) -> bool:
        """Call ``compute()`` (which stages the chunk ``key``) under the chunk's claim, unless the chunk is
        staged or another process holds its claim; returns whether this process computed it. Shards that
        call it on every chunk split the chunks between them, each computed once."""
        if self.has(key):
            return False
        claim = self.lock(f"chunk-{key}")
        if claim.acquire() is not None:
            return False  # another process is computing it
        try:
            if self.has(key):  # staged while this process waited for the lock
                return False
            compute()
            return True
        finally:
            claim.release()

    def load(self, trial_ids: Iterable[str]):
        """``(rows, arrays)`` of the staged chunk holding exactly ``trial_ids``, or ``None``."""
        import pandas as pd

        ids = sorted(map(str, trial_ids))
        k = self.key(ids)
        rows_path, arrays_path = self.folder / f"{k}.parquet", self.folder / f"{k}.npz"
        if not rows_path.is_file() or not arrays_path.is_file():
            return None
        try:
            rows = pd.read_parquet(rows_path)
            with np.load(arrays_path, allow_pickle=False) as npz:
                arrays = {name: npz[name] for name in npz.files}
        except (OSError, ValueError):  # unreadable: computed again (and overwritten)
            return None
        if sorted(rows["trial_id"].astype(str)) != ids:
            return None
        return rows, arrays

    def save(self, rows, arrays: dict[str, np.ndarray]) -> None:
        """Stage a chunk: ``rows`` (with ``trial_id``) and its ``arrays`` (arrays first, rows last)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        k = self.key(rows["trial_id"])
        buf = io.BytesIO()
        np.savez(buf, **{name: np.asarray(a) for name, a in arrays.items()})
        atomic_write_bytes(self.folder / f"{k}.npz", buf.getvalue())
        buf = io.BytesIO()
        rows.to_parquet(buf)
        atomic_write_bytes(self.folder / f"{k}.parquet", buf.getvalue())
