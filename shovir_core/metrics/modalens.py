"""ModaLens metrics: flip rates, margins, accuracies, agreement, transitions, interaction.

Definitions follow ModaLens §2 (flip rate; paired differences and ratios inside each bootstrap draw),
§4.1 (accuracy, balanced accuracy), §4.2 (modality-ablation interaction), §4.3 (Cohen's κ,
App. Table 10) and App. G (transitions on label-changed trials). Readouts are binary answers
(1 = yes, 0 = no); targets are binary labels after a label policy. All functions
take array-likes of equal length and validate them up front.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

__all__ = [
    "flips", "flip_rate", "rate_from_counts", "balanced_accuracy_from_counts", "paired_difference", "ratio",
    "margin_change_comparison",
    "margin", "margin_change_stats",
    "share_larger_without_report", "target_aligned_change", "confusion", "accuracy",
    "sensitivity", "specificity", "precision", "balanced_accuracy", "majority_baseline",
    "cohen_kappa", "response_bias_floor", "transitions", "modality_interaction",
    "interaction_from_cells", "MODALITY_CELLS", "auroc", "aurc",
]

MODALITY_CELLS = ("full", "report+q", "image+q", "q")
"""The four modality-ablation cells: image+report+question, report+question, image+question, question."""


def _binary(x, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=float).ravel()
    bad = ~np.isin(arr, (0.0, 1.0))
    if bad.any():
        raise ValueError(f"{name} must be binary 0/1 without missing values; found "
                         f"{np.unique(arr[bad]).tolist()[:5]} at {int(bad.sum())} positions")
    return arr.astype(bool)


def _same_len(**arrays) -> None:
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"inputs differ in length: {lengths}")
    if not next(iter(lengths.values())):
        raise ValueError(f"inputs are empty: {sorted(lengths)}")


def flips(readout_c, readout_d) -> np.ndarray:
    """Flip indicator 1[readout_c ≠ readout_d] per trial (source vs substitute image)."""
    a, b = _binary(readout_c, "readout_c"), _binary(readout_d, "readout_d")
    _same_len(readout_c=a, readout_d=b)
    return (a != b).astype(np.int8)


def flip_rate(readout_c, readout_d) -> float:
    """Flip rate: mean of 1[readout_c ≠ readout_d] over trials.

    >>> flip_rate([1, 0, 1, 1], [1, 1, 1, 0])
    0.5
    """
    return float(flips(readout_c, readout_d).mean())


def paired_difference(rate_a, rate_b):
    """Paired difference rate_a − rate_b (e.g. FR_A − FR_P, as a fraction; ×100 for pp)."""
    return np.subtract(rate_a, rate_b)


def ratio(rate_a, rate_b):
    """Ratio rate_a / rate_b; NaN where rate_b is 0 (no silent infinities)."""
    a, b = np.asarray(rate_a, dtype=float), np.asarray(rate_b, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(b != 0, a / np.where(b != 0, b, 1.0), np.nan)
    return float(out) if out.ndim == 0 else out


def margin(logit_yes, logit_no) -> np.ndarray:
    """Margin m = logit_yes − logit_no (= log p(yes) − log p(no))."""
    y, n = np.asarray(logit_yes, dtype=float), np.asarray(logit_no, dtype=float)
    if y.shape != n.shape:
        raise ValueError(f"logit shapes differ: {y.shape} vs {n.shape}")
    return y - n


def margin_change_stats(margin_c, margin_d, *, threshold: float = 0.5) -> dict[str, float]:
    """Paired margin change Δm = m_d − m_c: ``mean_abs_margin_change`` and ``share_margin_change_above``."""
    mc, md = np.asarray(margin_c, dtype=float), np.asarray(margin_d, dtype=float)
    _same_len(margin_c=mc, margin_d=md)
    if np.isnan(mc).any() or np.isnan(md).any():
        raise ValueError("margins contain NaN")
    d = np.abs(md - mc)
    return {"mean_abs_margin_change": float(d.mean()), "share_margin_change_above": float((d > threshold).mean())}


def share_larger_without_report(delta_m_absent, delta_m_present) -> float:
    """Share of trials with |Δm|_A > |Δm|_P (paired trials, report absent vs present)."""
    a, p = np.abs(np.asarray(delta_m_absent, dtype=float)), np.abs(np.asarray(delta_m_present, dtype=float))
    _same_len(delta_m_absent=a, delta_m_present=p)
    return float((a > p).mean())


def margin_change_comparison(delta_m_absent, delta_m_present, *, atol: float = 1e-9) -> dict[str, float]:
    """Shares of paired trials with |Δm|_A larger, |Δm|_P larger, or the two tied (within ``atol``).

    The three shares sum to 1, so a minority "larger without the report" is not read as a reversal
    when most of the rest are ties (e.g. an answer the image moves equally with and without the report).
    """
    a, p = np.abs(np.asarray(delta_m_absent, dtype=float)), np.abs(np.asarray(delta_m_present, dtype=float))
    _same_len(delta_m_absent=a, delta_m_present=p)
    tied = np.abs(a - p) <= atol
    return {"absent_larger": float(((a > p) & ~tied).mean()), "present_larger": float(((p > a) & ~tied).mean()),
            "tied": float(tied.mean())}


def target_aligned_change(margin_c, margin_d, target_d) -> dict[str, float]:
    """Target-aligned change y_d·(m_d − m_c), y_d = +1 / −1 for a substitute label of 1 / 0.

    Call it on label-changed trials. Returns ``target_aligned_change`` (mean) and
    ``share_target_aligned`` (share > 0).
    """
    mc, md = np.asarray(margin_c, dtype=float), np.asarray(margin_d, dtype=float)
    y = _binary(target_d, "target_d")
    _same_len(margin_c=mc, margin_d=md, target_d=y)
    v = np.where(y, 1.0, -1.0) * (md - mc)
    return {"target_aligned_change": float(v.mean()), "share_target_aligned": float((v > 0).mean())}


def confusion(pred, target) -> dict[str, int]:
    """Counts ``tp``, ``fp``, ``fn``, ``tn`` of binary predictions against binary targets."""
    p, t = _binary(pred, "pred"), _binary(target, "target")
    _same_len(pred=p, target=t)
    return {"tp": int((p & t).sum()), "fp": int((p & ~t).sum()),
            "fn": int((~p & t).sum()), "tn": int((~p & ~t).sum())}


def rate_from_counts(num, den):
    """num / den of counts (vectorised, e.g. over bootstrap draws); NaN where den = 0.

    Flip rates (flips / trials), accuracies (correct / trials), sensitivity (TP / (TP + FN)) ...
    all come from this one division.
    """
    n, d = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    out = np.where(d != 0, n / np.where(d != 0, d, 1.0), np.nan)
    return float(out) if out.ndim == 0 else out


def balanced_accuracy_from_counts(tp, fn, tn, fp, *, both_classes: bool = False):
    """(TPR + TNR) / 2 of counts (vectorised); NaN without targets.

    With one target class absent, ``both_classes=False`` returns the other class's rate
    (scikit-learn's convention); ``both_classes=True`` returns NaN: TPR (or TNR) is 0/0, so the
    balanced accuracy is undefined. Per-finding values that are macro-averaged use ``True`` (a
    finding without positives would otherwise count its specificity, often 1, as a balanced
    accuracy and inflate the macro average of an always-no responder above 0.5).
    """
    tpr, tnr = np.asarray(rate_from_counts(tp, np.add(tp, fn))), np.asarray(rate_from_counts(tn, np.add(tn, fp)))
    both = np.stack([tpr, tnr])
    n = (~np.isnan(both)).sum(axis=0)
    need = 2 if both_classes else 1
    out = np.where(n >= need, np.nansum(both, axis=0) / np.maximum(n, 1), np.nan)
    return float(out) if out.ndim == 0 else out


def _safe(num: float, den: float) -> float:
    return rate_from_counts(num, den)


def accuracy(pred, target) -> float:
    """Share of predictions equal to the target (concordant: source image vs source label)."""
    c = confusion(pred, target)
    return _safe(c["tp"] + c["tn"], sum(c.values()))


def sensitivity(pred, target) -> float:
    """TP / (TP + FN); NaN without positive targets."""
    c = confusion(pred, target)
    return _safe(c["tp"], c["tp"] + c["fn"])


def specificity(pred, target) -> float:
    """TN / (TN + FP); NaN without negative targets."""
    c = confusion(pred, target)
    return _safe(c["tn"], c["tn"] + c["fp"])


def precision(pred, target) -> float:
    """TP / (TP + FP); NaN without positive predictions."""
    c = confusion(pred, target)
    return _safe(c["tp"], c["tp"] + c["fp"])


def balanced_accuracy(pred, target, *, both_classes: bool = False) -> float:
    """(TPR + TNR) / 2; with one target class present, the rate of that class (as scikit-learn), or
    NaN with ``both_classes=True`` (see :func:`balanced_accuracy_from_counts`)."""
    c = confusion(pred, target)
    return balanced_accuracy_from_counts(c["tp"], c["fn"], c["tn"], c["fp"], both_classes=both_classes)


def majority_baseline(target) -> float:
    """max(prevalence, 1 − prevalence) of binary targets."""
    t = _binary(target, "target")
    prev = float(t.mean())
    return max(prev, 1.0 - prev)


def cohen_kappa(a, b) -> float:
    """Cohen's κ = (p_o − p_e) / (1 − p_e), chance agreement p_e from the two marginals.

    Works for any categorical answers (not only binary). Returns NaN when p_e = 1
    (both raters constant and equal), where κ is undefined.
    """
    x, y = np.asarray(a).ravel(), np.asarray(b).ravel()
    _same_len(a=x, b=y)
    if pd.isna(x).any() or pd.isna(y).any():
        raise ValueError("cohen_kappa: answers contain missing values")
    cats = np.union1d(x, y)
    pa = np.array([(x == k).mean() for k in cats])
    pb = np.array([(y == k).mean() for k in cats])
    p_o, p_e = float((x == y).mean()), float((pa * pb).sum())
    return (p_o - p_e) / (1.0 - p_e) if p_e < 1 else float("nan")


def response_bias_floor(answers) -> float:
    """Σ_k p_k² over answer categories (p_yes² + p_no² for yes/no answers)."""
    x = np.asarray(answers).ravel()
    if not len(x):
        raise ValueError("answers are empty")
    _, counts = np.unique(x, return_counts=True)
    p = counts / counts.sum()
    return float((p ** 2).sum())


def transitions(correct_c, correct_d) -> pd.DataFrame:
    """Correctness transitions from the source to the substitute image.

    On label-changed trials an unchanged answer changes correctness, so
    ``correct->correct`` and ``wrong->wrong`` are exactly the flips.

    Returns
    -------
    DataFrame
        Index ``transition`` (``correct->wrong``, ``wrong->correct``,
        ``correct->correct``, ``wrong->wrong``); columns ``n`` and ``share``.
    """
    c, d = _binary(correct_c, "correct_c"), _binary(correct_d, "correct_d")
    _same_len(correct_c=c, correct_d=d)
    n = {"correct->wrong": int((c & ~d).sum()), "wrong->correct": int((~c & d).sum()),
         "correct->correct": int((c & d).sum()), "wrong->wrong": int((~c & ~d).sum())}
    out = pd.DataFrame({"n": pd.Series(n)})
    out["share"] = out["n"] / len(c)
    out.index.name = "transition"
    return out


def interaction_from_cells(ba: dict[str, float]) -> dict[str, float]:
    """Image effects and their interaction from the balanced accuracies of the four cells.

    ``image_effect_without_report = BA(image+q) − BA(q)``,
    ``image_effect_with_report = BA(full) − BA(report+q)``,
    ``interaction`` = the second minus the first.

    >>> r = interaction_from_cells({"full": 0.717, "report+q": 0.770, "image+q": 0.665, "q": 0.5})
    >>> round(r["interaction"], 3)
    -0.218
    """
    missing = [k for k in MODALITY_CELLS if k not in ba]
    if missing:
        raise ValueError(f"balanced accuracies missing for cells {missing}")
    without = ba["image+q"] - ba["q"]
    with_ = ba["full"] - ba["report+q"]
    return {"image_effect_without_report": float(without), "image_effect_with_report": float(with_),
            "interaction": float(with_ - without)}


def modality_interaction(trials: pd.DataFrame, *, cell: str = "cell", pred: str = "pred",
                         target: str = "target", finding: str | None = "finding",
                         average: str = "pooled", findings: Sequence[str] | None = None) -> dict[str, float]:
    """The 2×2 modality-ablation interaction from trial rows.

    Parameters
    ----------
    trials : DataFrame
        One row per trial and cell, with columns ``cell`` (one of :data:`MODALITY_CELLS`),
        binary ``pred`` and ``target`` and, for ``average="macro"``, ``finding``.
    average : {"pooled", "macro"}
        ``pooled`` computes each cell's balanced accuracy over all its trials;
        ``macro`` averages the per-finding balanced accuracies over findings first; a finding
        whose targets lack a class has no balanced accuracy (NaN) and is left out of the average.
    findings : sequence of str, optional
        Restrict to these findings (e.g. to exclude the composite question).

    Returns
    -------
    dict
        The four cell balanced accuracies (``ba_<cell>``) plus the keys of
        :func:`interaction_from_cells`.
    """
    for col in (cell, pred, target) + ((finding,) if finding else ()):
        if col not in trials.columns and not (col == finding and average == "pooled"):
            raise ValueError(f"trials lack column {col!r}")
    df = trials
    if findings is not None:
        df = df[df[finding].isin(list(findings))]
    unknown = sorted(set(df[cell]) - set(MODALITY_CELLS))
    if unknown:
        raise ValueError(f"unknown cells {unknown}; expected {MODALITY_CELLS}")
    ba = {}
    for name in MODALITY_CELLS:
        sub = df[df[cell] == name]
        if sub.empty:
            raise ValueError(f"no trials in cell {name!r}")
        if average == "pooled":
            ba[name] = balanced_accuracy(sub[pred], sub[target])
        elif average == "macro":
            per = np.array([balanced_accuracy(g[pred], g[target], both_classes=True) for _, g in sub.groupby(finding)])
            ba[name] = float(np.nanmean(per)) if (~np.isnan(per)).any() else float("nan")
        else:
            raise ValueError(f"average must be 'pooled' or 'macro', got {average!r}")
    out = {f"ba_{k}": v for k, v in ba.items()}
    out.update(interaction_from_cells(ba))
    return out


def auroc(scores, target) -> float:
    """Area under the ROC curve of continuous ``scores`` (e.g. margins) for binary ``target``.

    Computed by the Mann-Whitney rank statistic (ties count one half); NaN when a
    class is absent.
    """
    from scipy.stats import rankdata

    x = np.asarray(scores, dtype=float).ravel()
    t = _binary(target, "target")
    _same_len(scores=x, target=t)
    if np.isnan(x).any():
        raise ValueError("scores contain NaN")
    n_pos, n_neg = int(t.sum()), int((~t).sum())
    if not n_pos or not n_neg:
        return float("nan")
    ranks = rankdata(x)
    return float((ranks[t].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def aurc(confidence, correct) -> float:
    """Area under the risk-coverage curve (selective prediction; lower is better).

    Trials are sorted by decreasing ``confidence``; at coverage k/n the risk is the
    error rate of the k most confident trials; AURC is the mean risk over k = 1..n.
    Ties in confidence are broken by keeping the original order of the trials.
    """
    c = np.asarray(confidence, dtype=float).ravel()
    ok = _binary(correct, "correct")
    _same_len(confidence=c, correct=ok)
    if np.isnan(c).any():
        raise ValueError("confidence contains NaN")
    order = np.argsort(-c, kind="stable")
    errors = np.cumsum(~ok[order])
    return float(np.mean(errors / np.arange(1, len(c) + 1)))
