"""Decoded image files, kept per process while the file is unchanged.

A demo book's worker makes many records of one cohort (the ModaLens arms of several chapters, ShoViR's
tables), and each decoded every image again: 10 s of the demo book's worker time. :func:`read_pixels`
keeps the arrays it decoded, read-only (as ``np.asarray`` of a PIL image already is), in a
least-recently-used store of at most :data:`MAX_BYTES` per process, keyed by the file's path, size,
modification time and inode, so an edited or replaced file is decoded again.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Callable

import numpy as np

__all__ = ["read_pixels", "kept_pixels", "MAX_BYTES"]

MAX_BYTES = 256 << 20
"""The most bytes of decoded pixels a process keeps (an array larger than a quarter of it is not kept)."""

_kept: OrderedDict[tuple, np.ndarray] = OrderedDict()
_kept_bytes = 0
_lock = threading.Lock()  # callers on several threads of one process share the store


def read_pixels(path: str | Path) -> np.ndarray:
    """The pixels of an image file as a read-only array (uint8 or uint16, 2-D for grayscale).

    Raises what PIL raises for a file that does not decode (``OSError``, ``SyntaxError``, ``ValueError``).
    """
    return kept_pixels(path, None, _decode)


def kept_pixels(path: str | Path, variant, make: Callable[[str | Path], np.ndarray]) -> np.ndarray:
    """``make(path)`` (an array computed from the file alone, e.g. decoded and resized), made once per process
    while the file is unchanged and returned read-only; ``variant`` names what ``make`` computes (hashable)."""
    global _kept_bytes
    st = os.stat(path)
    key = (os.fspath(path), st.st_size, st.st_mtime_ns, st.st_ino, variant)
    with _lock:
        arr = _kept.get(key)
        if arr is not None:
            _kept.move_to_end(key)
            return arr
    arr = make(path)
    arr.flags.writeable = False
    if arr.nbytes <= MAX_BYTES // 4:
        with _lock:
            if key not in _kept:
                _kept[key] = arr
                _kept_bytes += arr.nbytes
            while _kept_bytes > MAX_BYTES:
                _, old = _kept.popitem(last=False)
                _kept_bytes -= old.nbytes
    return arr


def _decode(path: str | Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im)
