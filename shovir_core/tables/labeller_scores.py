"""Score report labellers against reference labels (e.g. IU X-ray MeSH terms).

The Labeller chapter's tables are built from these by :mod:`shovir_core.tables.labeller`.
(They live in ``tables/`` so that ``labeling`` does not depend on ``metrics``, which labels reports.)
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import pandas as pd

from ..metrics.classification import f1_from_counts, f1_score, per_class_f1

__all__ = ["score_labels", "micro_f1", "label_frames", "split_rows", "micro_f1_difference"]


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


def label_frames(trials: pd.DataFrame, labeller: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(pred, ref)`` of one labeller from a ``labeller-validation`` record's trials.

    ``ref`` holds the ``ref.<class>`` columns, ``pred`` the labeller's ``<labeller>.<class>`` codes,
    both with plain class names as columns.
    """
    ref_cols = [c for c in trials.columns if c.startswith("ref.")]
    if not ref_cols:
        raise ValueError("trials hold no reference columns 'ref.<class>'")
    classes = [c[len("ref."):] for c in ref_cols]
    missing = [f"{labeller}.{c}" for c in classes if f"{labeller}.{c}" not in trials.columns]
    if missing:
        raise ValueError(f"trials hold no codes of labeller {labeller!r} (missing {missing[:3]})")
    ref = trials[ref_cols].set_axis(classes, axis=1)
    pred = trials[[f"{labeller}.{c}" for c in classes]].set_axis(classes, axis=1)
    return pred, ref


def split_rows(trials: pd.DataFrame, split: str) -> pd.DataFrame:
    """The trials of one split (``dev``, ``test``); ``"all"`` keeps every trial."""
    if split == "all":
        return trials
    if split not in set(trials["split"]):
        raise ValueError(f"no trials in split {split!r}; have {sorted(set(trials['split']))}")
    return trials[trials["split"] == split]


def micro_f1_difference(trials: pd.DataFrame, *, a: str, b: str, split: str = "test",
                        uncertain: str = "negative", n_draws: int = 10_000,
                        rng: np.random.Generator) -> dict[str, float]:
    """Micro-F1 of labeller ``a`` minus ``b`` with a report-level percentile bootstrap interval.

    Reports are resampled with replacement; each draw recomputes both micro-F1s
    from the resampled TP / FP / FN sums, so the interval is that of the paired
    difference.
    """
    from ..metrics.classification import binarize
    from ..stats import cluster_bootstrap

    sub = split_rows(trials, split)
    cols = {}
    for lab in (a, b):
        pred, ref = label_frames(sub, lab)
        keep = ref.notna().to_numpy()
        p = binarize(pred, classes=list(pred.columns), uncertain=uncertain).to_numpy() == 1
        r = ref.to_numpy() == 1
        cols[f"tp_{lab}"] = (p & r & keep).sum(1)
        cols[f"fp_{lab}"] = (p & ~r & keep).sum(1)
        cols[f"fn_{lab}"] = (~p & r & keep).sum(1)
    frame = pd.DataFrame(cols).assign(report=sub["report_id"].to_numpy())

    def statistic(s):
        fa = f1_from_counts(s[f"tp_{a}"], s[f"fp_{a}"], s[f"fn_{a}"], zero_division=np.nan)
        fb = f1_from_counts(s[f"tp_{b}"], s[f"fp_{b}"], s[f"fn_{b}"], zero_division=np.nan)
        return {"f1_a": fa, "f1_b": fb, "diff": fa - fb}

    res = cluster_bootstrap(frame, cluster="report", sums={k: k for k in cols}, statistic=statistic,
                            n_draws=n_draws, rng=rng)
    est, lo, hi = res.interval("diff")
    return {"diff": est, "lo": lo, "hi": hi, "f1_a": res.estimates[(None, "f1_a")],
            "f1_b": res.estimates[(None, "f1_b")], "n_reports": int(len(frame)), "n_draws": n_draws,
            "seed": res.seed}
