"""Decoded image files, kept per process while the file is unchanged.

A demo book's worker makes many records of one cohort (the ModaLens arms of several chapters, ShoViR's
tables), and each decoded every image again: 10 s of the demo book's worker time. :func:`read_pixels`
keeps the arrays it decoded, read-only (as ``np.asarray`` of a PIL image already is), in a
least-recently-used store of at most 256 MB per process (:data:`STORE`), keyed by the file's path, size,
modification time and inode, so an edited or replaced file is decoded again.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np

from ..bounded_store import BoundedStore

__all__ = ["read_pixels", "kept_pixels", "STORE"]

STORE = BoundedStore(max_bytes=256 << 20)
"""The decoded pixels a process keeps (an array larger than a quarter of its bound is not kept)."""


def read_pixels(path: str | Path) -> np.ndarray:
    """The pixels of an image file as a read-only array (uint8 or uint16, 2-D for grayscale).

    Raises what PIL raises for a file that does not decode (``OSError``, ``SyntaxError``, ``ValueError``).
    """
    return kept_pixels(path, None, _decode)


def kept_pixels(path: str | Path, variant, make: Callable[[str | Path], np.ndarray]) -> np.ndarray:
    """``make(path)`` (an array computed from the file alone, e.g. decoded and resized), made once per process
    while the file is unchanged and returned read-only; ``variant`` names what ``make`` computes (hashable)."""
    st = os.stat(path)
    key = (os.fspath(path), st.st_size, st.st_mtime_ns, st.st_ino, variant)
    return STORE.get_or_make(key, lambda: _read_only(make(path)))


def _read_only(arr: np.ndarray) -> tuple[np.ndarray, int]:
    arr.flags.writeable = False
    return arr, arr.nbytes


def _decode(path: str | Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im)
