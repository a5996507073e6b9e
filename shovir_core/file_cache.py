"""An in-process cache that notices when the files behind a cached value change.

``functools.lru_cache`` keeps what a loader read for the life of the process, so a check such as
"the dataset changed since the spec was resolved" can never fire in the process that loaded it.
:func:`cache_by_files` keeps every result together with a *stat signature* of the files it came
from (path, size and modification time in nanoseconds, or "missing") and calls the loader again
whenever that signature differs. Stat-ing a few thousand image files takes milliseconds; hashing
them (what :attr:`shovir_core.data.Dataset.manifest_hash` does) takes seconds, which is why the
protocols cache at all.

A file rewritten in place with the same size within the file system's timestamp resolution is not
noticed; content hashes (the dataset hash a record pins) remain the guard of a record's identity.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "notes.txt"
>>> _ = path.write_text("one")
>>> @cache_by_files(lambda text, p: [p])
... def read(p):
...     return p.read_text()
>>> read(path), read(path), read.cache_info()["misses"]
('one', 'one', 1)
>>> _ = path.write_text("three")
>>> read(path), read.cache_info()["misses"]
('three', 2)

Inside :func:`checked_once`, a result's files are stat-ed once:

>>> with checked_once():
...     first = read(path)
...     _ = path.write_text("seventeen")
...     inside = read(path)
>>> first, inside, read(path)
('three', 'three', 'seventeen')
>>> import shutil; shutil.rmtree(path.parent)
"""
from __future__ import annotations

import functools
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["cache_by_files", "stat_signature", "checked_once"]

_ONCE = threading.local()


@contextmanager
def checked_once() -> Iterator[None]:
    """Within the block (in this thread), each cached result's files are stat-ed once, not at every call.

    For a pass that asks for the same datasets hundreds of times in a few seconds and makes nothing from
    them -- the book's plan resolves every record's spec to name its run (about 600 dataset look-ups of the
    demo book, each stat-ing its 1,002 files: 1.7 s before the first task could start). A record is never
    made inside such a block: its process resolves and executes it again, with every check. (The module's
    example shows both.)
    """
    outer = getattr(_ONCE, "seen", None)
    if outer is None:
        _ONCE.seen = set()
    try:
        yield
    finally:
        if outer is None:
            _ONCE.seen = None


def stat_signature(paths: Iterable[str | os.PathLike]) -> tuple:
    """``(path, size, mtime_ns)`` of every path, in the given order (``(path, None, None)`` if missing)."""
    out = []
    for p in paths:
        try:
            st = os.stat(p)
        except FileNotFoundError:
            out.append((str(p), None, None))
        else:
            out.append((str(p), st.st_size, st.st_mtime_ns))
    return tuple(out)


def _key(args: tuple, kwargs: dict) -> str:
    return json.dumps([args, sorted(kwargs.items())], sort_keys=True, default=str)


def cache_by_files(files: Callable[..., Iterable[str | os.PathLike]], *, maxsize: int = 8):
    """Decorate a loader so its results are reused only while their files are unchanged.

    Parameters
    ----------
    files : callable
        ``files(result, *args, **kwargs)``: the paths ``result`` was read from (a dataset's image and
        metadata files and its folder; a resource file). Called once per load; on every later call
        with the same arguments these paths are stat-ed again and the loader re-runs when any
        changed (or appeared, or vanished).
    maxsize : int
        Results kept, least recently used first out.

    The wrapped function gains ``cache_clear()`` and ``cache_info()``. Arguments make the key through
    their JSON form (``str`` for anything else), so dict options are fine.
    """
    if maxsize < 1:
        raise ValueError(f"cache_by_files: maxsize must be >= 1, got {maxsize}")

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        entries: OrderedDict[str, tuple[tuple[Path, ...], tuple, Any]] = OrderedDict()
        stats = {"hits": 0, "misses": 0}
        lock = threading.Lock()

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            key = _key(args, kwargs)
            seen = getattr(_ONCE, "seen", None)  # inside checked_once(): results already checked there
            with lock:
                hit = entries.get(key)
            if hit is not None:
                paths, signature, value = hit
                if (seen is not None and (id(entries), key, signature) in seen) or stat_signature(paths) == signature:
                    with lock:
                        entries.move_to_end(key)
                        stats["hits"] += 1
                    if seen is not None:
                        seen.add((id(entries), key, signature))
                    return value
            value = fn(*args, **kwargs)
            paths = tuple(Path(p) for p in files(value, *args, **kwargs))
            signature = stat_signature(paths)
            with lock:
                entries[key] = (paths, signature, value)
                entries.move_to_end(key)
                while len(entries) > maxsize:
                    entries.popitem(last=False)
                stats["misses"] += 1
            if seen is not None:
                seen.add((id(entries), key, signature))
            return value

        def cache_clear() -> None:
            with lock:
                entries.clear()
                stats.update(hits=0, misses=0)

        def cache_info() -> dict:
            with lock:
                return {**stats, "size": len(entries), "maxsize": maxsize}

        wrapper.cache_clear = cache_clear  # type: ignore[attr-defined]
        wrapper.cache_info = cache_info  # type: ignore[attr-defined]
        return wrapper

    return decorate
