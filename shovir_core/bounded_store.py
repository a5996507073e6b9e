"""A least-recently-used store bounded by the bytes of what it holds, safe for several threads of one process.

Used for what a process computes again and again from unchanged inputs: decoded image files
(:mod:`shovir_core.data.pixels`) and image processors' outputs (:mod:`shovir_core.models.image_inputs`).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable

__all__ = ["BoundedStore"]


class BoundedStore:
    """Values by key, at most ``max_bytes`` of them; a value larger than a quarter of that is not kept.

    >>> store = BoundedStore(max_bytes=8)
    >>> store.get_or_make("a", lambda: ("A", 2)), store.get_or_make("a", lambda: ("other", 2))
    ('A', 'A')
    >>> [store.get_or_make(k, lambda: (k, 2)) for k in "bcde"] and list(store.keys())  # "a" used least recently
    ['b', 'c', 'd', 'e']
    """

    def __init__(self, *, max_bytes: int) -> None:
        self.max_bytes = int(max_bytes)
        self._held: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get_or_make(self, key: Hashable, make: Callable[[], tuple[Any, int | None]]) -> Any:
        """The value kept for ``key``, or ``make()``'s value, kept if its size is known and small enough.

        ``make()`` returns ``(value, nbytes)``, ``nbytes`` ``None`` for a value not to keep. It runs outside
        the lock (two threads may both make a missing value; the first one kept stays).
        """
        with self._lock:
            held = self._held.get(key)
            if held is not None:
                self._held.move_to_end(key)
                return held[0]
        value, size = make()
        if size is not None and size <= self.max_bytes // 4:
            with self._lock:
                if key not in self._held:
                    self._held[key] = (value, int(size))
                    self._bytes += int(size)
                while self._bytes > self.max_bytes:
                    _, (_, old) = self._held.popitem(last=False)
                    self._bytes -= old
        return value

    @property
    def nbytes(self) -> int:
        """Bytes held now."""
        return self._bytes

    def keys(self) -> list[Hashable]:
        """The keys held, least recently used first."""
        with self._lock:
            return list(self._held)

    def clear(self) -> None:
        with self._lock:
            self._held.clear()
            self._bytes = 0
