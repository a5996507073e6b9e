"""Random streams derived from ids, never from iteration order or process.

A perturbation's stream is a function of ``(seed, item id, target class,
condition)`` only: the ids are hashed (SHA-256) into 32-bit words that, with the
seed, form the entropy of a :class:`numpy.random.SeedSequence`. Any process on
any machine, visiting items in any order, draws the same numbers for the same
item, so every model sees byte-identical perturbed inputs.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np

__all__ = ["stream_key", "seed_sequence", "item_rng"]


def _plain(part: object):
    if part is None or isinstance(part, str):
        return part
    if isinstance(part, (int, np.integer)) and not isinstance(part, bool):
        return int(part)
    return str(part)


def stream_key(*parts: object) -> str:
    """The canonical text a stream is derived from (a JSON list; recorded with each output).

    >>> stream_key(0, "img1", "Atelectasis", "OCO")
    '[0, "img1", "Atelectasis", "OCO"]'
    """
    return json.dumps([_plain(p) for p in parts], ensure_ascii=False)


def seed_sequence(seed: int, *parts: object) -> np.random.SeedSequence:
    """A :class:`numpy.random.SeedSequence` for ``seed`` and the ids ``parts``.

    >>> a = seed_sequence(0, "img1", "Atelectasis", "OCO").generate_state(2)
    >>> b = seed_sequence(0, "img1", "Atelectasis", "OCO").generate_state(2)
    >>> bool((a == b).all())
    True
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    digest = hashlib.sha256(stream_key(*parts).encode("utf-8")).digest()
    words = np.frombuffer(digest, dtype="<u4").tolist()
    return np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(seed) >> 32, *words])


def item_rng(seed: int, *parts: object, n: int = 1) -> list[np.random.Generator]:
    """``n`` independent generators for one item (e.g. box placement, then noise).

    Child ``k`` is the same whatever ``n`` is, so adding a stream never changes
    the earlier ones.
    """
    return [np.random.default_rng(s) for s in seed_sequence(seed, *parts).spawn(n)]
