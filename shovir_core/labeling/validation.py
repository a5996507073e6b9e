"""Score report labellers against reference labels (e.g. IU X-ray MeSH terms)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import pandas as pd

from ..metrics.classification import f1_score, per_class_f1

__all__ = ["score_labels", "micro_f1"]


def score_labels(pred: pd.DataFrame, reference: pd.DataFrame, *, classes: Sequence[str] | None = None,
                 uncertain: Literal["negative", "positive"] = "negative") -> pd.DataFrame:
    """Per-class precision, recall and F1 of labeller codes against a binary reference.

    Parameters
    ----------
    pred : DataFrame
        Labeller codes (1 / 0 / -1 / NaN), indexed like ``reference``.
    reference : DataFrame
        Reference labels 1 / 0, NaN where a report is not scored for a class.
    classes : sequence of str, optional
        Classes to score (default: the reference's columns).
    uncertain : {"negative", "positive"}
        How the labeller's uncertain codes count.

    Returns
    -------
    DataFrame
        Index ``class``; columns ``tp fp fn tn support precision recall f1 n``.
    """
    cls = list(classes) if classes is not None else list(reference.columns)
    missing = [i for i in reference.index if i not in pred.index]
    if missing:
        raise ValueError(f"{len(missing)} reference reports have no labeller output (e.g. id {missing[0]!r})")
    rows = []
    for c in cls:
        ref = reference[c]
        keep = ref.notna()
        r = ref[keep].to_frame(c)
        p = pred.loc[r.index, [c]]
        t = per_class_f1(p, r, classes=[c], uncertain=uncertain)
        rows.append(t.assign(n=int(keep.sum())))
    return pd.concat(rows)


def micro_f1(table: pd.DataFrame) -> float:
    """Micro-F1 pooled over the classes of a :func:`score_labels` table."""
    if table.empty:
        return float(np.nan)
    return f1_score(table, average="micro")
