"""Deterministic shards of a protocol's trial grid (one record made by several processes).

A protocol's ``execute`` builds its whole trial grid as usual, then keeps the part of it that
belongs to this process's shard with :func:`select` (one line), skips trials already stored, and
ends with ``writer.complete(...)``, which completes the record only when every shard has
finished (:meth:`shovir_core.records.RunWriter.complete`); :func:`result` returns the record.

Shard assignment is by a *unit key* that keeps the work that shares computation together: all
questions of one case (ModaLens: ``case_id``, so prefix reuse and the inference cache still apply,
and one case lands in the same shard in every arm) or all conditions and p of one image (ShoViR:
``image_id``, so the decoded image, the shared noise field of a p grid and the p = 0 baseline
report are reused). Units are ordered by the SHA-256 of their key and dealt round-robin, so the
assignment depends only on the set of units (the grid), never on iteration order or on which
trials are already done, and shard sizes differ by at most one unit.

>>> assign(["a", "b", "c", "d", "e"], 2)  # keys in SHA-256 order, dealt round-robin
{'d': 0, 'c': 1, 'b': 0, 'e': 1, 'a': 0}
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable

import pandas as pd

from ..records import Run, RunWriter, Shard, load_run
from .spec import SpecError

__all__ = ["assign", "select", "mine", "result", "Shard"]


def _order(key: str) -> str:
    return hashlib.sha256(str(key).encode()).hexdigest()


def assign(keys: Iterable, count: int) -> dict:
    """Unit key -> shard index for ``count`` shards (balanced; a function of the set of keys)."""
    if not isinstance(count, int) or count < 1:
        raise SpecError(f"shard count {count!r} must be a positive integer")
    units = sorted(set(keys), key=lambda k: (_order(k), str(k)))
    return {k: i % count for i, k in enumerate(units)}


def select(items, writer: RunWriter, *, key: str, size: Callable[[dict], int] | None = None, units=None):
    """The items of ``writer``'s shard, and the shard's planned trial count recorded.

    ``items`` is the protocol's *whole* grid: a DataFrame with a ``key`` column (one trial per row)
    or a list of dicts with a ``key`` entry (``size(item)`` trials each, default 1). ``units``: the
    keys the assignment is dealt over (default: the items' own); pass the grid's full set when an
    arm drops some units (a ModaLens text control drops cases without report sections), so a unit
    lands in the same shard in every arm. Unsharded writers get everything back.
    """
    shard = writer.shard
    if isinstance(items, pd.DataFrame):
        if key not in items.columns:
            raise KeyError(f"shard key {key!r} is not a column of the trial frame")
        if shard.sharded:
            owner = assign(items[key] if units is None else units, shard.count)
            items = items[items[key].map(owner) == shard.index]
        writer.plan_shard(len(items))
        return items
    items = list(items)
    if shard.sharded:
        owner = assign((it[key] for it in items) if units is None else units, shard.count)
        items = [it for it in items if owner[it[key]] == shard.index]
    writer.plan_shard(sum(size(it) for it in items) if size else len(items))
    return items


def mine(units, shard: Shard | None) -> list:
    """The units of ``units`` (in their order) that :func:`select` gives ``shard`` (all of them unsharded)."""
    units = list(dict.fromkeys(units))
    if shard is None or not shard.sharded:
        return units
    owner = assign(units, shard.count)
    return [u for u in units if owner[u] == shard.index]


def result(writer: RunWriter) -> Run:
    """The record ``writer`` wrote: loaded (and verified) when complete, else the open record."""
    if writer.is_complete:
        return load_run(writer.protocol, writer.name, writer.path.name, root=writer.path.parents[2])
    return Run(writer.path)
