"""The opening of a ModaLens prompt-variant chapter (App. H: text-block order, App. L: a second
question template, App. M: option order and abstention): its records, their trials, the arms of the
primary model and -- where the reference models' planted checks apply -- the same arms of
``ref-blind-prior`` (records ``blind_<arm>``), with the chapter's bootstrap draws glued.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from ..params import load_runs
from .glue import glue

__all__ = ["VariantChapter", "variant_chapter", "BLIND_PREFIX"]

BLIND_PREFIX = "blind_"
"""Run keys of the ``ref-blind-prior`` arms: ``blind_<arm>`` (params/<chapter>/demo.yaml)."""


@dataclass(frozen=True)
class VariantChapter:
    """A prompt-variant chapter's records (``runs``), their trials (``trials``, by run key) and whether the
    reference models' planted checks apply (``reference_validation``)."""

    runs: Mapping
    trials: Mapping[str, pd.DataFrame]
    reference_validation: bool

    def arms(self, keys: Sequence[str], *, prefix: str = "", optional: bool = False) -> dict[str, pd.DataFrame]:
        """``{arm: trials of run <prefix><arm>}``; ``optional`` leaves out arms without a record."""
        return {k: self.trials[f"{prefix}{k}"] for k in keys if not optional or f"{prefix}{k}" in self.trials}

    def blind(self, keys: Sequence[str]) -> dict[str, pd.DataFrame]:
        """The ``ref-blind-prior`` arms (``{}`` where the planted checks do not apply)."""
        return self.arms(keys, prefix=BLIND_PREFIX) if self.reference_validation else {}


def variant_chapter(notebook: str, *, namespace: str, profile: str, run_ids=None, n_draws: int,
                    reference_validation: bool) -> VariantChapter:
    """Load the chapter's records (:func:`shovir_core.params.load_runs`) and glue ``<namespace>.n_draws``."""
    runs = load_runs(notebook, profile=profile, run_ids=run_ids)
    glue(f"{namespace}.n_draws", n_draws, runs=runs)
    return VariantChapter(runs=runs, trials={key: run.trials for key, run in runs.items()},
                          reference_validation=bool(reference_validation))
