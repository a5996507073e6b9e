"""Ready-made vectorised statistics for :func:`~shovir_core.stats.cluster_bootstrap`.

Each factory returns a function mapping summed arrays (by the names given in
``sums``) to named statistics, evaluated for every draw at once. Ratios of sums
are NaN where the denominator is 0 (counted as undefined draws, never 0).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["rates", "paired_rates", "balanced_accuracy_stat", "clustered_balanced_accuracy", "kappa_stat", "combine"]


def _div(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return np.where(b != 0, a / np.where(b != 0, b, 1.0), np.nan)


def _need(s: Mapping[str, np.ndarray], *names: str) -> None:
    missing = [n for n in names if n not in s]
    if missing:
        raise KeyError(f"statistic needs sums {missing}; have {sorted(s)}")


def rates(**defs: tuple[str, str]):
    """Rates as ratios of sums: ``rates(fr_P=("flip_P", "n"))`` -> ``fr_P = Σ flip_P / Σ n``."""
    if not defs:
        raise ValueError("rates() needs at least one name=(numerator, denominator)")

    def statistic(s):
        for num, den in defs.values():
            _need(s, num, den)
        return {name: _div(s[num], s[den]) for name, (num, den) in defs.items()}
    return statistic


def paired_rates(a: str, b: str, *, den: str = "n", names: tuple[str, str] = ("rate_a", "rate_b")):
    """Two rates on the same trials with their paired difference and ratio.

    Returns statistics ``names[0]`` (Σa/Σden), ``names[1]`` (Σb/Σden),
    ``diff`` (first − second) and ``ratio`` (first / second), all inside each draw.
    """
    na, nb = names

    def statistic(s):
        _need(s, a, b, den)
        ra, rb = _div(s[a], s[den]), _div(s[b], s[den])
        return {na: ra, nb: rb, "diff": ra - rb, "ratio": _div(ra, rb)}
    return statistic


def balanced_accuracy_stat(*, tp: str = "tp", fn: str = "fn", tn: str = "tn", fp: str = "fp",
                           name: str = "balanced_accuracy"):
    """(TPR + TNR) / 2 from summed confusion indicators, plus ``sensitivity`` and ``specificity``."""
    def statistic(s):
        _need(s, tp, fn, tn, fp)
        sens, spec = _div(s[tp], s[tp] + s[fn]), _div(s[tn], s[tn] + s[fp])
        return {name: (sens + spec) / 2.0, "sensitivity": sens, "specificity": spec}
    return statistic


def kappa_stat(*, n: str = "n", agree: str = "agree", yes_a: str = "yes_a", yes_b: str = "yes_b",
               name: str = "cohen_kappa"):
    """Cohen's κ of two binary raters from summed indicators (agreement, each rater's yes)."""
    def statistic(s):
        _need(s, n, agree, yes_a, yes_b)
        pa, pb, po = _div(s[yes_a], s[n]), _div(s[yes_b], s[n]), _div(s[agree], s[n])
        pe = pa * pb + (1 - pa) * (1 - pb)
        return {name: _div(po - pe, 1 - pe)}
    return statistic


def combine(*statistics):
    """One statistic returning the union of several (later names win on clashes)."""
    def statistic(s):
        out = {}
        for f in statistics:
            out.update(f(s))
        return out
    return statistic


def clustered_balanced_accuracy(pred_yes, target, *, clusters, n_draws: int, seed: int) -> dict:
    """Balanced accuracy (TPR + TNR) / 2 of binary answers against binary targets, with a
    cluster (patient) percentile bootstrap interval (ModaLens App. F, L: the original image against
    its own label). Trials whose target is NaN are dropped.

    Returns ``balanced_accuracy``, ``lo``, ``hi``, ``sensitivity``, ``specificity`` (point values),
    ``accuracy``, ``yes_rate`` and ``n`` (trials scored); NaNs and ``n = 0`` without trials.

    >>> out = clustered_balanced_accuracy([1, 0, 1, 0], [1, 0, 0, 0], clusters=[1, 1, 2, 2], n_draws=50, seed=0)
    >>> out["balanced_accuracy"], out["sensitivity"], out["specificity"], out["n"]
    (0.8333333333333333, 1.0, 0.6666666666666666, 4)
    """
    import pandas as pd

    from .bootstrap import cluster_bootstrap

    y, t = np.asarray(pred_yes, dtype=float), np.asarray(target, dtype=float)
    keep = ~np.isnan(t)
    y, t, g = y[keep], t[keep], np.asarray(clusters)[keep]
    if not len(t):
        return {k: float("nan") for k in ("balanced_accuracy", "lo", "hi", "sensitivity", "specificity",
                                          "accuracy", "yes_rate")} | {"n": 0}
    frame = pd.DataFrame({"cluster": g, "tp": y * t, "fn": (1 - y) * t, "tn": (1 - y) * (1 - t), "fp": y * (1 - t)})
    res = cluster_bootstrap(frame, cluster="cluster", sums={c: c for c in ("tp", "fn", "tn", "fp")},
                            statistic=balanced_accuracy_stat(), n_draws=n_draws, rng=np.random.default_rng(seed))
    ba, lo, hi = res.interval("balanced_accuracy")
    return {"balanced_accuracy": ba, "lo": lo, "hi": hi, "sensitivity": float(res.interval("sensitivity")[0]),
            "specificity": float(res.interval("specificity")[0]), "accuracy": float((y == t).mean()),
            "yes_rate": float(y.mean()), "n": int(len(t))}
