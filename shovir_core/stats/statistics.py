"""Ready-made vectorised statistics for :func:`~shovir_core.stats.cluster_bootstrap`.

Each factory returns a function mapping summed arrays (by the names given in
``sums``) to named statistics, evaluated for every draw at once. Ratios of sums
are NaN where the denominator is 0 (counted as undefined draws, never 0).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["rates", "paired_rates", "balanced_accuracy_stat", "kappa_stat", "combine"]


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
