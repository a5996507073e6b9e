"""Replaying the ShoViR authors' random streams: one legacy ``numpy.random.RandomState`` per experiment.

The reference code draws its perturbations from numpy's global legacy generator. Two versions of its
runner exist (``arco-group/ShoViR-Bench``):

``"legacy-stream"``
    ``src/benchmark/cli.py`` @06324c9 seeds ``np.random.seed(seed)`` once (default seed 3) and the
    samples are preprocessed one after another, so each experiment (one condition at one p, a
    separate run of the command) consumes **one** ``RandomState(seed)`` in dataset order;
``"legacy-per-sample"``
    ``src/benchmark/hf_runner.py`` @2a15203 / @07a7a6d preprocesses in a process pool and reseeds per
    sample: ``RandomState((seed + idx) % 2**32)`` with ``idx`` the sample's position in the
    experiment's dataset dict.

The experiment's dataset, in the authors' order, is: for image-level conditions (Baseline, Full Noise)
every image in the dataset's own order; for RO / OCO / DOCO the per-class files concatenated in the
order of their class names (``sorted`` underscore names, as ``cli._resolve_experiment_dataset`` lists
them), each class's images in the dataset's order, DOCO without the items it drops. :class:`LegacyStreams`
hands out, for an item, the generator positioned where the authors' run would be when it reaches that
item; items the record does not evaluate are consumed without pixels
(:func:`shovir_core.perturb.reference.advance`). The project's default, per-item streams derived from
ids (:mod:`.rng`), are order-independent; these are not, and are only offered with the reference-code
engine.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np

__all__ = ["RNG_MODES", "LegacyStreams", "authors_class_order"]

RNG_MODES = ("per-item", "legacy-stream", "legacy-per-sample")
"""The ``rng`` options of the ``shovir`` protocol."""


def authors_class_order(classes: Sequence[str]) -> list[str]:
    """Classes in the order of the reference code's category lists (sorted ``Lung_Lesion``-style names).

    >>> authors_class_order(["Pleural Other", "Lung Opacity", "Pleural Effusion", "Atelectasis"])
    ['Atelectasis', 'Lung Opacity', 'Pleural Effusion', 'Pleural Other']
    """
    return sorted(classes, key=lambda c: c.replace(" ", "_"))


class LegacyStreams:
    """Legacy streams of the experiments of one record.

    Parameters
    ----------
    mode : {"legacy-stream", "legacy-per-sample"}
    seed : int
    orders : dict
        condition -> the experiment's items (hashable keys) in the authors' order.
    skip : callable
        ``skip(condition, p, key, rng)`` consumes ``rng`` for an item without computing its output.
    """

    def __init__(self, mode: str, seed: int, orders: dict[str, Sequence[Hashable]],
                 skip: Callable[[str, float, Hashable, np.random.RandomState], None]) -> None:
        if mode not in RNG_MODES[1:]:
            raise ValueError(f"legacy stream mode {mode!r} not in {RNG_MODES[1:]}")
        self.mode, self.seed, self.skip = mode, int(seed), skip
        self.orders = {c: list(keys) for c, keys in orders.items()}
        self.position = {c: {k: i for i, k in enumerate(keys)} for c, keys in self.orders.items()}
        self._streams: dict[tuple[str, float], list] = {}
        self.skipped = 0
        """Items consumed without pixels (not evaluated by this run, or already stored)."""

    def __contains__(self, item: tuple[str, Hashable]) -> bool:
        condition, key = item
        return key in self.position.get(condition, {})

    def rank(self, condition: str, key: Hashable) -> int:
        """The item's index in its experiment's dataset (KeyError when the authors' run has no such item)."""
        return self.position[condition][key]

    def rng_for(self, condition: str, p: float, key: Hashable) -> np.random.RandomState:
        """The generator positioned at ``key`` in experiment ``(condition, p)``; the caller consumes it for that item.

        Under ``"legacy-stream"`` items must be requested in increasing order per experiment to be
        cheap (an earlier item restarts the stream from the seed).
        """
        j = self.rank(condition, key)
        if self.mode == "legacy-per-sample":
            return np.random.RandomState((self.seed + j) % 2**32)
        slot = self._streams.get((condition, float(p)))
        if slot is None or j < slot[1]:
            slot = [np.random.RandomState(self.seed), 0]
            self._streams[(condition, float(p))] = slot
        rng, cursor = slot
        while cursor < j:
            self.skip(condition, float(p), self.orders[condition][cursor], rng)
            self.skipped += 1
            cursor += 1
        slot[1] = j + 1
        return rng
