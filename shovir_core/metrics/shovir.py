"""ShoViR shortcut metrics: Δ_FN, Δ_X and the flip rate FR^c_X, as functions of counts.

Definitions (ShoViR §3.4, "Evaluation Axes"):

* Δ_FN = F1(Baseline) − F1(Full Noise Image), for F1_14 and F1_5;
* Δ_X = μ-F1(RO) − μ-F1(X), X ∈ {OCO, DOCO}, with μ-F1 = Σ_c n_c F1_c / Σ_c n_c;
* FR^c_X = |{i : y_ic = 1, ŷ^RO_ic = 1, ŷ^X_ic = 0}| / |{i : y_ic = 1, ŷ^RO_ic = 1}|,
  the share of the findings the control arm (RO) still reports that the
  occlusion arm X drops. Pooled over classes either by micro-pooling the (i, c)
  pairs (default, recommended) or by a class-weighted mean.

One formula, two layouts. The tables score *items* (one (image, class) pair per row, the label of
the item's class on each side): :func:`shortcut_counts` turns them into per-item count columns,
:func:`shortcut_from_counts` turns summed counts -- over all items, or over the items of one
bootstrap draw (vectorised) -- into FR, both μ-F1 and Δ_X, and :func:`shortcut_scores` does both
on one set of items. :func:`flip_rate_by_class` scores wide frames (rows images, columns classes)
with the same indicator function (:func:`flip_indicators`).

Label policy. Labels are binary 0/1, NaN where the label policy excludes a label (uncertain codes
under ``uncertain="excluded"``: :func:`shovir_core.labels.apply_policy` with ``"u-excluded"``). An
item is scored only where every label the metric reads is present: FR reads y, ŷ^RO and ŷ^X; Δ_X
reads the reference label and both predictions (both μ-F1 on the same items), as per-class F1 drops
a (prediction, reference) pair with an excluded side.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from .classification import f1_from_counts, weighted_mean

__all__ = [
    "delta_fn", "delta_x", "flip_indicators", "flip_rate_from_counts", "mu_f1_from_counts",
    "shortcut_counts", "shortcut_from_counts", "shortcut_scores", "flip_rate_by_class", "pooled_flip_rate",
]

ARMS = ("ro", "x")
"""Arms of a shortcut comparison: the control arm (RO) and the occlusion arm X."""


def delta_fn(f1_baseline, f1_full_noise):
    """Δ_FN = F1(Baseline) − F1(Full Noise Image) (scalars or aligned arrays/Series)."""
    return _diff(f1_baseline, f1_full_noise, "delta_fn")


def delta_x(mu_f1_ro, mu_f1_x):
    """Δ_X = μ-F1(RO) − μ-F1(X) (scalars or aligned arrays/Series)."""
    return _diff(mu_f1_ro, mu_f1_x, "delta_x")


def _diff(a, b, name):
    if isinstance(a, (pd.Series, pd.DataFrame)) or isinstance(b, (pd.Series, pd.DataFrame)):
        return a - b
    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a_arr.shape != b_arr.shape:
        raise ValueError(f"{name}: shapes differ ({a_arr.shape} vs {b_arr.shape})")
    out = a_arr - b_arr
    return float(out) if out.ndim == 0 else out


def _labels(x, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=float)
    bad = ~np.isin(arr, (0.0, 1.0)) & ~np.isnan(arr)
    if bad.any():
        raise ValueError(f"{name} must hold binary 0/1 labels (NaN = excluded or not evaluated); "
                         f"found {np.unique(arr[bad]).tolist()} (apply a label policy first)")
    return arr


def flip_indicators(y, pred_ro, pred_x) -> tuple[np.ndarray, np.ndarray]:
    """Per-label eligible and flipped indicators of FR (boolean arrays of the inputs' shape).

    Eligible: y = 1 and ŷ^RO = 1; flipped: eligible and ŷ^X = 0. A label with any of the three
    missing (NaN: excluded by the label policy, or not evaluated) is neither.

    >>> e, f = flip_indicators([1, 1, 1, 0], [1, 1, np.nan, 1], [0, 1, 0, 0])
    >>> e.tolist(), f.tolist()
    ([True, True, False, False], [True, False, False, False])
    """
    yy, ro, xx = _labels(y, "y"), _labels(pred_ro, "pred_ro"), _labels(pred_x, "pred_x")
    if not (yy.shape == ro.shape == xx.shape):
        raise ValueError(f"shapes differ: y {yy.shape}, pred_ro {ro.shape}, pred_x {xx.shape}")
    eligible = (yy == 1) & (ro == 1) & ~np.isnan(xx)
    return eligible, eligible & (xx == 0)


def flip_rate_from_counts(flipped, eligible):
    """FR = flipped / eligible of count arrays (vectorised); NaN where nothing is eligible."""
    f, e = np.asarray(flipped, dtype=float), np.asarray(eligible, dtype=float)
    out = np.where(e > 0, f / np.where(e > 0, e, 1.0), np.nan)
    return float(out) if out.ndim == 0 else out


def mu_f1_from_counts(tp, fp, fn, n):
    """μ-F1 = Σ_c n_c F1_c / Σ_c n_c from per-class counts (classes on the last axis; vectorised).

    NaN where no class has items. F1_c of a class without predictions or references is 0.
    """
    return weighted_mean(f1_from_counts(tp, fp, fn), n, axis=-1)


def _count_name(kind: str, arm: str | None, cls: str) -> str:
    return f"{kind}_{arm}|{cls}" if arm else f"{kind}|{cls}"


def shortcut_counts(target: Sequence[str], *, y, ref, pred_ro, pred_x,
                    classes: Sequence[str] | None = None) -> pd.DataFrame:
    """Per-item count columns of FR and Δ_X; sum them over items (or a bootstrap draw's items).

    Parameters
    ----------
    target : sequence of str
        The class c of each item (an item is one (image, class) pair).
    y, ref, pred_ro, pred_x : array-like
        Binary labels of each item's class (NaN = excluded by the label policy): ground truth
        (FR's y), the reference label of the F1 (Δ_X), the prediction under RO and under X.
    classes : sequence of str, optional
        Classes to keep columns for (default: the classes present, sorted).

    Returns
    -------
    DataFrame
        One row per item; columns ``eligible``, ``flipped`` (FR), ``fr_scored`` (the item's FR
        labels are all present), ``dx_scored`` (its Δ_X labels are all present) and, per class c,
        ``n|c`` (items of c scored for Δ_X) and ``tp_ro|c``, ``fp_ro|c``, ``fn_ro|c``,
        ``tp_x|c``, ``fp_x|c``, ``fn_x|c``.
    """
    tgt = np.asarray(target, dtype=object)
    yy, rf = _labels(y, "y"), _labels(ref, "ref")
    ro, xx = _labels(pred_ro, "pred_ro"), _labels(pred_x, "pred_x")
    if not (len(tgt) == len(yy) == len(rf) == len(ro) == len(xx)):
        raise ValueError(f"lengths differ: target {len(tgt)}, y {len(yy)}, ref {len(rf)}, "
                         f"pred_ro {len(ro)}, pred_x {len(xx)}")
    classes = sorted(set(tgt)) if classes is None else list(classes)
    eligible, flipped = flip_indicators(yy, ro, xx)
    fr_scored = ~(np.isnan(yy) | np.isnan(ro) | np.isnan(xx))
    dx = ~(np.isnan(rf) | np.isnan(ro) | np.isnan(xx))
    cols = {"eligible": eligible, "flipped": flipped, "fr_scored": fr_scored, "dx_scored": dx}
    r1 = rf == 1
    for c in classes:
        inc = dx & (tgt == c)
        cols[_count_name("n", None, c)] = inc
        for arm, pred in zip(ARMS, (ro, xx)):
            p1 = pred == 1
            cols[_count_name("tp", arm, c)] = inc & p1 & r1
            cols[_count_name("fp", arm, c)] = inc & p1 & ~r1
            cols[_count_name("fn", arm, c)] = inc & ~p1 & r1
    return pd.DataFrame({k: v.astype(float) for k, v in cols.items()})


def shortcut_from_counts(sums: Mapping[str, np.ndarray], classes: Sequence[str]) -> dict[str, np.ndarray]:
    """FR, μ-F1 of both arms and Δ_X from summed :func:`shortcut_counts` columns (vectorised).

    ``sums`` maps each column name to its sum (a scalar, or one value per bootstrap draw).
    Returns ``fr``, ``mu_f1_r`` (RO), ``mu_f1_x`` (X) and ``delta`` = Δ_X.
    """
    def stack(kind, arm):
        return np.stack([np.asarray(sums[_count_name(kind, arm, c)], dtype=float) for c in classes], axis=-1)

    n = stack("n", None)
    mu = {arm: mu_f1_from_counts(stack("tp", arm), stack("fp", arm), stack("fn", arm), n) for arm in ARMS}
    return {"fr": flip_rate_from_counts(sums["flipped"], sums["eligible"]), "mu_f1_r": mu["ro"],
            "mu_f1_x": mu["x"], "delta": delta_x(mu["ro"], mu["x"])}


def shortcut_scores(target: Sequence[str], *, y, ref, pred_ro, pred_x) -> dict[str, float]:
    """Point estimates of FR, μ-F1(RO), μ-F1(X) and Δ_X on one set of items, with their counts.

    Takes the inputs of :func:`shortcut_counts`; returns ``fr``, ``mu_f1_r``, ``mu_f1_x``,
    ``delta``, ``n_items``, ``n_eligible``, ``n_flipped`` and ``n_excluded`` (items whose reference
    or prediction labels the policy excludes: out of Δ_X, and out of FR when a prediction is).

    >>> s = shortcut_scores(["Edema"] * 3, y=[1, 1, 1], ref=[1, 1, 1], pred_ro=[1, 1, 0], pred_x=[0, 1, 0])
    >>> round(s["fr"], 3), round(s["delta"], 3)
    (0.5, 0.3)
    """
    counts = shortcut_counts(target, y=y, ref=ref, pred_ro=pred_ro, pred_x=pred_x)
    classes = sorted(set(np.asarray(target, dtype=object)))
    out = {k: float(v) for k, v in shortcut_from_counts(counts.sum().to_dict(), classes).items()}
    out.update({"n_items": int(len(counts)), "n_eligible": int(counts["eligible"].sum()),
                "n_flipped": int(counts["flipped"].sum()), "n_excluded": int(len(counts) - counts["dx_scored"].sum())})
    return out


def _binary_frame(x, name: str, classes: Sequence[str] | None) -> pd.DataFrame:
    if not isinstance(x, pd.DataFrame):
        raise TypeError(f"{name} must be a DataFrame (rows: images, columns: classes)")
    cols = list(classes) if classes is not None else list(x.columns)
    missing = [c for c in cols if c not in x.columns]
    if missing:
        raise ValueError(f"{name} lacks class columns {missing}")
    return pd.DataFrame(_labels(x.loc[:, cols].to_numpy(dtype=float), name), index=x.index, columns=cols)


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
        row order as ``y``; NaN where the label policy excludes a label (the pair is not scored).
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
    eligible, flipped = flip_indicators(yy.to_numpy(), ro.to_numpy(), xx.to_numpy())
    n_el, n_fl = eligible.sum(0), flipped.sum(0)
    return pd.DataFrame({"n_annotated": (yy.to_numpy() == 1).sum(0), "n_eligible": n_el, "n_flipped": n_fl,
                         "flip_rate": flip_rate_from_counts(n_fl, n_el)}, index=pd.Index(yy.columns, name="class"))


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
        return flip_rate_from_counts(table["n_flipped"].sum(), table["n_eligible"].sum())
    if pooling == "class_weighted":
        return float(weighted_mean(table.loc[ok, "flip_rate"].to_numpy(), table.loc[ok, "n_annotated"].to_numpy()))
    if pooling == "macro":
        return float(table.loc[ok, "flip_rate"].mean())
    raise ValueError(f"pooling must be 'micro', 'class_weighted' or 'macro', got {pooling!r}")
