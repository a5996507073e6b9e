"""ShoViR shortcut metrics: Δ_FN, Δ_X and the flip rate FR^c_X.

Definitions (ShoViR §3.4, the equations for Δ_FN, Δ_X and FR^c_X; μ-F1 weights as stated there):

* Δ_FN = F1(Baseline) − F1(Full Noise Image), for F1_14 and F1_5;
* Δ_X = μ-F1(RO) − μ-F1(X), X ∈ {OCO, DOCO};
* FR^c_X = |{i : y_ic = 1, ŷ^RO_ic = 1, ŷ^X_ic = 0}| / |{i : y_ic = 1, ŷ^RO_ic = 1}|,
  the share of the findings the control arm (RO) still reports that the
  occlusion arm X drops. Pooled over classes either by micro-pooling the (i, c)
  pairs (default, recommended) or by a class-weighted mean.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

__all__ = ["delta_fn", "delta_x", "flip_rate_by_class", "pooled_flip_rate"]


def delta_fn(f1_baseline, f1_full_noise):
    """Δ_FN = F1(Baseline) − F1(Full Noise Image) (scalars or aligned arrays/Series)."""
    return _diff(f1_baseline, f1_full_noise, "delta_fn")


def delta_x(mu_f1_ro, mu_f1_x):
    """Δ_X = μ-F1(RO) − μ-F1(X) (scalars or aligned arrays/Series)."""
    return _diff(mu_f1_ro, mu_f1_x, "delta_x")


def _diff(a, b, name):
    if isinstance(a, pd.Series) or isinstance(b, pd.Series):
        return a - b
    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a_arr.shape != b_arr.shape:
        raise ValueError(f"{name}: shapes differ ({a_arr.shape} vs {b_arr.shape})")
    out = a_arr - b_arr
    return float(out) if out.ndim == 0 else out


def _binary_frame(x, name: str, classes: Sequence[str] | None) -> pd.DataFrame:
    if not isinstance(x, pd.DataFrame):
        raise TypeError(f"{name} must be a DataFrame (rows: images, columns: classes)")
    cols = list(classes) if classes is not None else list(x.columns)
    missing = [c for c in cols if c not in x.columns]
    if missing:
        raise ValueError(f"{name} lacks class columns {missing}")
    arr = x.loc[:, cols].to_numpy(dtype=float)
    bad = ~np.isin(arr, (0.0, 1.0)) & ~np.isnan(arr)
    if bad.any():
        raise ValueError(f"{name} must hold binary 0/1 labels (NaN = not evaluated); "
                         f"found {np.unique(arr[bad]).tolist()} (apply a label policy first)")
    return pd.DataFrame(arr, index=x.index, columns=cols)


def flip_rate_by_class(y: pd.DataFrame, pred_ro: pd.DataFrame, pred_x: pd.DataFrame, *,
                       classes: Sequence[str] | None = None) -> pd.DataFrame:
    """Per-class flip rate FR^c_X with its counts.

    Parameters
    ----------
    y : DataFrame
        Ground-truth binary labels (rows: images, columns: classes); NaN marks an
        image that is not evaluated for that class.
    pred_ro, pred_x : DataFrame
        Binary labels of the reports generated under RO and under X, same shape and
        row order as ``y``.
    classes : sequence of str, optional
        Classes to score (default: the columns of ``y``).

    Returns
    -------
    DataFrame
        Index ``class``; columns ``n_annotated`` (images with y = 1),
        ``n_eligible`` (y = 1 and RO positive), ``n_flipped`` (also X negative)
        and ``flip_rate`` (NaN when nothing is eligible).
    """
    yy = _binary_frame(y, "y", classes)
    ro = _binary_frame(pred_ro, "pred_ro", yy.columns)
    xx = _binary_frame(pred_x, "pred_x", yy.columns)
    if not (len(yy) == len(ro) == len(xx)):
        raise ValueError(f"row counts differ: y {len(yy)}, pred_ro {len(ro)}, pred_x {len(xx)}")
    y1, ro1, x0 = yy.to_numpy() == 1, ro.to_numpy() == 1, xx.to_numpy() == 0
    eligible = y1 & ro1
    flipped = eligible & x0
    n_el, n_fl = eligible.sum(0), flipped.sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(n_el > 0, n_fl / np.maximum(n_el, 1), np.nan)
    return pd.DataFrame({"n_annotated": y1.sum(0), "n_eligible": n_el, "n_flipped": n_fl,
                         "flip_rate": rate}, index=pd.Index(yy.columns, name="class"))


def pooled_flip_rate(table: pd.DataFrame, *, pooling: str = "micro") -> float:
    """Pool a :func:`flip_rate_by_class` table over classes.

    ``pooling="micro"`` (default) divides the summed flips by the summed eligible
    pairs; ``"class_weighted"`` averages the class rates weighted by ``n_annotated``
    (as μ-F1 weights F1); ``"macro"`` is the unweighted mean over classes with
    eligible pairs.
    """
    ok = table["n_eligible"] > 0
    if not ok.any():
        return float("nan")
    if pooling == "micro":
        return float(table["n_flipped"].sum() / table["n_eligible"].sum())
    if pooling == "class_weighted":
        w = table.loc[ok, "n_annotated"].astype(float)
        return float((table.loc[ok, "flip_rate"] * w).sum() / w.sum())
    if pooling == "macro":
        return float(table.loc[ok, "flip_rate"].mean())
    raise ValueError(f"pooling must be 'micro', 'class_weighted' or 'macro', got {pooling!r}")
