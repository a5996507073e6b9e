"""Label-agreement metrics of report generation: per-class F1, F1_14 / F1_5, μ-F1.

Inputs are CheXpert label codes (1 positive, 0 negative, -1 uncertain, NaN blank)
in DataFrames with one column per class, as returned by
:func:`shovir_core.labeling.label_reports`. Codes become binary through a label
policy (:mod:`shovir_core.labels`): by default uncertain and blank are negative,
as in the F1-CheXbert convention of counting only positive mentions.

References
----------
Smit A. et al., "CheXbert", EMNLP 2020; Miura Y. et al., "Improving factual
completeness and consistency of image-to-text radiology report generation",
NAACL 2021 (F1-CheXbert for report generation).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import pandas as pd

from ..labels import CHEXPERT_5, CHEXPERT_CLASSES, LabelPolicy, apply_policy

__all__ = [
    "binarize", "confusion_by_class", "per_class_f1", "f1_score", "f1_chexbert",
    "report_label_f1", "mu_f1", "f1_from_counts", "prf_from_counts", "weighted_mean", "CLASS_SETS",
]

CLASS_SETS: dict[str, tuple[str, ...]] = {"14": CHEXPERT_CLASSES, "5": CHEXPERT_5}
"""Named class sets: ``"14"`` (all CheXpert classes) and ``"5"`` (the F1_5 subset)."""

Uncertain = Literal["negative", "positive", "excluded"]


def _classes(classes: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(classes, str):
        try:
            return CLASS_SETS[classes]
        except KeyError:
            raise ValueError(f"unknown class set {classes!r}; use one of {sorted(CLASS_SETS)} or a list of classes") from None
    out = tuple(classes)
    if not out:
        raise ValueError("classes is empty")
    return out


def binarize(codes: pd.DataFrame, *, classes: str | Sequence[str] = "14",
             uncertain: Uncertain = "negative") -> pd.DataFrame:
    """Binary 0/1 labels (NaN where excluded) of the ``classes`` columns of ``codes``.

    Blank (not mentioned) is always negative here; ``uncertain`` chooses how -1 maps.
    Columns already holding 0/1 pass through unchanged.
    """
    cls = _classes(classes)
    if not isinstance(codes, pd.DataFrame):
        raise TypeError(f"codes must be a DataFrame with class columns, got {type(codes).__name__}")
    missing = [c for c in cls if c not in codes.columns]
    if missing:
        raise ValueError(f"label frame lacks class columns {missing}")
    if uncertain not in ("negative", "positive", "excluded"):
        raise ValueError(f"uncertain must be 'negative', 'positive' or 'excluded', got {uncertain!r}")
    return apply_policy(codes.loc[:, list(cls)].astype(float), LabelPolicy(uncertain=uncertain, blank="negative"))


def _aligned(pred: pd.DataFrame, ref: pd.DataFrame) -> None:
    if len(pred) != len(ref):
        raise ValueError(f"predicted labels have {len(pred)} rows but reference labels have {len(ref)}")


def confusion_by_class(pred: pd.DataFrame, ref: pd.DataFrame, *, classes: str | Sequence[str] = "14",
                       uncertain: Uncertain = "negative") -> pd.DataFrame:
    """Per-class TP, FP, FN, TN (rows: classes) of predicted vs reference codes.

    Rows are paired by position. A pair is skipped for a class when either side is
    excluded by the ``uncertain="excluded"`` policy.
    """
    _aligned(pred, ref)
    p = binarize(pred, classes=classes, uncertain=uncertain).to_numpy(float)
    r = binarize(ref, classes=classes, uncertain=uncertain).to_numpy(float)
    ok = ~(np.isnan(p) | np.isnan(r))
    p1, r1 = (p == 1) & ok, (r == 1) & ok
    out = pd.DataFrame({
        "tp": (p1 & r1).sum(0), "fp": (p1 & ~r1 & ok).sum(0),
        "fn": (~p1 & r1 & ok).sum(0), "tn": (~p1 & ~r1 & ok).sum(0),
    }, index=pd.Index(_classes(classes), name="class"))
    return out.astype(int)


def _ratio(num, den, zero_division: float):
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), zero_division)


def f1_from_counts(tp, fp, fn, *, zero_division: float = 0.0):
    """F1 = 2 TP / (2 TP + FP + FN) of count arrays (vectorised: any shape, e.g. bootstrap draws).

    The one F1 formula of the package: per-class F1, F1_14 / F1_5, μ-F1 and Δ_X all call it.
    ``zero_division`` is the value where 2 TP + FP + FN = 0 (scikit-learn's convention is 0).

    >>> float(f1_from_counts(3, 1, 2))
    0.6666666666666666
    """
    tp, fp, fn = (np.asarray(x, dtype=float) for x in (tp, fp, fn))
    return _ratio(2 * tp, 2 * tp + fp + fn, zero_division)


def weighted_mean(values, weights, *, axis: int = -1):
    """Σ w v / Σ w along ``axis`` (NaN where Σ w = 0); vectorised. μ-F1 is the F1_c weighted by n_c."""
    v, w = np.asarray(values, dtype=float), np.asarray(weights, dtype=float)
    num, den = (w * np.where(w > 0, v, 0.0)).sum(axis=axis), w.sum(axis=axis)
    return _ratio(num, den, np.nan)


def prf_from_counts(tp, fp, fn, *, zero_division: float = 0.0):
    """``(precision, recall, F1)`` of count arrays (vectorised); ``zero_division`` where undefined."""
    tp, fp, fn = (np.asarray(x, dtype=float) for x in (tp, fp, fn))
    precision = _ratio(tp, tp + fp, zero_division)
    recall = _ratio(tp, tp + fn, zero_division)
    return precision, recall, f1_from_counts(tp, fp, fn, zero_division=zero_division)


def _prf(tp, fp, fn, zero_division: float):
    return prf_from_counts(tp, fp, fn, zero_division=zero_division)


def per_class_f1(pred: pd.DataFrame, ref: pd.DataFrame, *, classes: str | Sequence[str] = "14",
                 uncertain: Uncertain = "negative", zero_division: float = 0.0) -> pd.DataFrame:
    """Per-class precision, recall, F1 and support (reference positives).

    Parameters
    ----------
    pred, ref : DataFrame
        Label codes, one column per class, rows paired by position.
    classes : "14", "5" or sequence of str
        Classes to score.
    uncertain : {"negative", "positive", "excluded"}
        Mapping of uncertain (-1) codes; blank is negative.
    zero_division : float
        Value of a ratio whose denominator is zero (scikit-learn's convention is 0).

    Returns
    -------
    DataFrame
        Index ``class``; columns ``tp fp fn tn support precision recall f1``.
    """
    conf = confusion_by_class(pred, ref, classes=classes, uncertain=uncertain)
    precision, recall, f1 = _prf(conf.tp, conf.fp, conf.fn, zero_division)
    return conf.assign(support=conf.tp + conf.fn, precision=precision, recall=recall, f1=f1)


def f1_score(table: pd.DataFrame, *, average: Literal["micro", "macro"] = "micro",
             zero_division: float = 0.0) -> float:
    """Micro (pooled counts) or macro (mean of per-class F1) F1 of a :func:`per_class_f1` table."""
    if average == "micro":
        return float(_prf(table.tp.sum(), table.fp.sum(), table.fn.sum(), zero_division)[2])
    if average == "macro":
        return float(np.mean(_prf(table.tp, table.fp, table.fn, zero_division)[2]))
    raise ValueError(f"average must be 'micro' or 'macro', got {average!r}")


def f1_chexbert(pred: pd.DataFrame, ref: pd.DataFrame, *, classes: str | Sequence[str] = "14",
                average: Literal["micro", "macro"] = "micro", uncertain: Uncertain = "negative",
                zero_division: float = 0.0) -> float:
    """F1 of predicted against reference report labels (F1_14 with ``classes="14"``, F1_5 with ``"5"``).

    >>> import pandas as pd
    >>> ref = pd.DataFrame({"Cardiomegaly": [1, 0, 1], "Edema": [0, 1, -1]})
    >>> pred = pd.DataFrame({"Cardiomegaly": [1, 1, 0], "Edema": [0, 1, 1]})
    >>> round(f1_chexbert(pred, ref, classes=["Cardiomegaly", "Edema"]), 3)
    0.571
    """
    table = per_class_f1(pred, ref, classes=classes, uncertain=uncertain, zero_division=zero_division)
    return f1_score(table, average=average, zero_division=zero_division)


def report_label_f1(pred: pd.DataFrame, ref: pd.DataFrame, *, uncertain: Uncertain = "negative",
                    zero_division: float = 0.0) -> dict[str, float]:
    """The four ShoViR label metrics: ``f1_14_micro``, ``f1_14_macro``, ``f1_5_micro``, ``f1_5_macro``.

    Which reference is used (labels of the reference report, or the dataset's
    labels) is the caller's choice; :func:`shovir_core.metrics.report.report_metrics`
    labels the reference reports by default.
    """
    out = {}
    for key in ("14", "5"):
        table = per_class_f1(pred, ref, classes=key, uncertain=uncertain, zero_division=zero_division)
        for avg in ("micro", "macro"):
            out[f"f1_{key}_{avg}"] = f1_score(table, average=avg, zero_division=zero_division)
    return out


def mu_f1(f1: Mapping[str, float] | pd.Series, n: Mapping[str, int] | pd.Series) -> float:
    """Disease-level μ-F1 = Σ_c n_c F1_c / Σ_c n_c (ShoViR).

    Parameters
    ----------
    f1 : mapping or Series
        Per-class F1 on each class's evaluation subset.
    n : mapping or Series
        Number of annotated images per class (the weights). Classes with ``n_c = 0``
        do not count; every class with ``n_c > 0`` needs a finite F1.

    >>> mu_f1({"Edema": 0.5, "Atelectasis": 1.0}, {"Edema": 3, "Atelectasis": 1})
    0.625
    """
    f1s, ns = pd.Series(f1, dtype=float), pd.Series(n, dtype=float)
    if (ns < 0).any():
        raise ValueError(f"class counts must be non-negative: {ns[ns < 0].to_dict()}")
    used = ns[ns > 0]
    if used.empty:
        raise ValueError("mu_f1 needs at least one class with n_c > 0")
    missing = [c for c in used.index if c not in f1s.index or not np.isfinite(f1s[c])]
    if missing:
        raise ValueError(f"mu_f1: no finite F1 for classes with annotated images: {missing}")
    return float(weighted_mean(f1s[used.index].to_numpy(), used.to_numpy()))
