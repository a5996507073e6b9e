"""Agreement between two binary label sources from confusion counts (ModaLens Appendix E).

The counts are those of an automated label (``a``) against a reference label (``m``, the manual
one, taken as the truth): ``tp`` = a 1 and m 1, ``fp`` = a 1 and m 0, ``fn`` = a 0 and m 1,
``tn`` = a 0 and m 0. Every function accepts numpy arrays of counts (one entry per bootstrap draw)
as well as scalars, so the same formula runs inside :func:`shovir_core.stats.cluster_bootstrap`.

ModaLens App. E reports agreement 0.943, Cohen's κ 0.795, automated sensitivity 0.894 and
precision 0.773 against the manual label; with those three rates the implied prevalences are
0.155 (manual) and 0.179 (automated) and κ follows (Part E check of the appendix):

>>> from shovir_core.metrics.label_agreement import kappa_from_rates
>>> round(kappa_from_rates(agreement=0.943, sensitivity=0.894, precision=0.773), 3)
0.795
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "agreement_stats", "kappa_from_counts", "kappa_from_rates", "expected_reader_confusion",
]


def _div(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(b != 0, a / np.where(b != 0, b, 1.0), np.nan)
    return out if out.ndim else float(out)


def kappa_from_counts(tp, fp, fn, tn):
    """Cohen's κ = (p_o − p_e) / (1 − p_e), chance agreement p_e from the two marginals.

    >>> round(kappa_from_counts(40, 10, 5, 45), 4)
    0.7
    """
    tp, fp, fn, tn = (np.asarray(x, dtype=float) for x in (tp, fp, fn, tn))
    n = tp + fp + fn + tn
    po = _div(tp + tn, n)
    pa, pm = _div(tp + fp, n), _div(tp + fn, n)
    pe = pa * pm + (1 - pa) * (1 - pm)
    return _div(po - pe, 1 - pe)


def agreement_stats(tp, fp, fn, tn) -> dict:
    """Agreement, κ, sensitivity and precision of ``a`` against ``m``, and both prevalences."""
    tp, fp, fn, tn = (np.asarray(x, dtype=float) for x in (tp, fp, fn, tn))
    n = tp + fp + fn + tn
    return {
        "agreement": _div(tp + tn, n), "kappa": kappa_from_counts(tp, fp, fn, tn),
        "sensitivity": _div(tp, tp + fn), "precision": _div(tp, tp + fp),
        "prevalence_reference": _div(tp + fn, n), "prevalence_automated": _div(tp + fp, n),
    }


def kappa_from_rates(*, agreement: float, sensitivity: float, precision: float) -> float:
    """κ implied by agreement, sensitivity and precision (the counts are fixed by the three rates).

    With ``n`` = 1: tp = s·π_m and tp = p·π_a, disagreement 1 − agreement = fp + fn =
    π_a − tp + π_m − tp; solving gives π_m = (1 − agreement) / (1 + s/p − 2s).
    """
    pi_m = (1 - agreement) / (1 + sensitivity / precision - 2 * sensitivity)
    tp = sensitivity * pi_m
    pi_a = tp / precision
    fp, fn = pi_a - tp, pi_m - tp
    return float(kappa_from_counts(tp, fp, fn, 1 - tp - fp - fn))


def expected_reader_confusion(auto, *, error_rate: float, composite_of=None) -> dict:
    """Expected confusion counts of ``auto`` against a simulated reader that flips each label.

    The simulated second reader (:func:`shovir_core.labeling.second_reader.simulate_second_reader`)
    flips every study-level binary finding label independently with probability ``error_rate``.
    For a finding question the reader says yes with probability a(1 − e) + (1 − a)e. For the
    composite (yes iff any of the 13 findings is yes), with k of the 13 automated labels positive,
    the reader says no only when all k positives flip and none of the 13 − k negatives does:
    P(no) = e^k (1 − e)^(13 − k).

    Parameters
    ----------
    auto
        Automated binary targets, one per (trial, image side).
    composite_of
        ``None`` for finding questions only, else for each entry the number of positive automated
        findings of its study (k) where the entry is a composite question and ``-1`` elsewhere.

    Returns the expected ``tp, fp, fn, tn`` (floats summing to the number of entries).
    """
    if not 0.0 <= error_rate <= 1.0:
        raise ValueError(f"error_rate must lie in [0, 1], got {error_rate}")
    a = np.asarray(auto, dtype=float)
    e = float(error_rate)
    p_yes = a * (1 - e) + (1 - a) * e
    if composite_of is not None:
        k = np.asarray(composite_of, dtype=float)
        if k.shape != a.shape:
            raise ValueError("composite_of must have one entry per automated label")
        comp = k >= 0
        p_yes = np.where(comp, 1 - e ** np.maximum(k, 0) * (1 - e) ** (13 - np.maximum(k, 0)), p_yes)
    return {"tp": float((a * p_yes).sum()), "fp": float((a * (1 - p_yes)).sum()),
            "fn": float(((1 - a) * p_yes).sum()), "tn": float(((1 - a) * (1 - p_yes)).sum())}
