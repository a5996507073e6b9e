"""Rates of per-trial indicators and contrasts between them (differences, ratios, interactions),
all evaluated on the same patient-clustered bootstrap draws, so a contrast's interval is the
percentile interval of the contrast's draws (ModaLens §3, "Statistics"; the arm statistics of the
ModaLens appendix tables D, H, L, M, the text controls and §4.1).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from .bootstrap import cluster_bootstrap

__all__ = ["bootstrap_rates", "contrast_value", "CONTRAST_KINDS"]

CONTRAST_KINDS = ("diff", "ratio", "interaction")
"""``("diff", a, b)`` = a − b; ``("ratio", a, b)`` = a / b; ``("interaction", a, b, c, d)`` = (a − b) − (c − d)."""



def contrast_value(spec: tuple, rates: Mapping[str, np.ndarray]):
    """Evaluate one contrast (:data:`CONTRAST_KINDS`) on rates (arrays or floats)."""
    kind, *names = spec
    missing = [n for n in names if n not in rates]
    if missing:
        raise KeyError(f"contrast {spec}: unknown rates {missing}; have {sorted(rates)}")
    r = [np.asarray(rates[n], dtype=float) for n in names]
    if kind == "diff" and len(r) == 2:
        return r[0] - r[1]
    if kind == "ratio" and len(r) == 2:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(r[1] != 0, r[0] / np.where(r[1] != 0, r[1], 1.0), np.nan)
    if kind == "interaction" and len(r) == 4:
        return (r[0] - r[1]) - (r[2] - r[3])
    raise ValueError(f"contrast {spec}: use ('diff', a, b), ('ratio', a, b) or ('interaction', a, b, c, d)")


def bootstrap_rates(frame: pd.DataFrame, *, rates: Mapping[str, str | tuple[str, str]],
                    contrasts: Mapping[str, tuple] | None = None, n_draws: int, seed: int,
                    cluster: str = "patient_id", strata: str | None = None, substitute: str | None = None
                    ) -> dict[object, dict[str, tuple[float, float, float]]] | dict[str, tuple[float, float, float]]:
    """Rates of per-trial indicators and contrasts between them, with patient-clustered intervals.

    Parameters
    ----------
    frame
        One row per trial with ``cluster`` and the indicator columns (NaN-free).
    rates
        Name -> indicator column (rate = Σ column / number of trials) or ``(numerator, denominator)``
        columns (rate = Σ numerator / Σ denominator, e.g. a rate on a subset).
    contrasts
        Name -> contrast spec over rate names (:data:`CONTRAST_KINDS`).
    strata, substitute
        As :func:`shovir_core.stats.cluster_bootstrap` (strata on the same draws; joint
        resampling of patients and substitute seeds).

    Returns
    -------
    dict
        Name -> ``(estimate, lo, hi)``; with ``strata``, stratum -> that dict.
    """
    contrasts = dict(contrasts or {})
    if frame.empty:
        raise ValueError("bootstrap_rates: no trials")
    data = frame.assign(_n=1.0)
    sums: dict[str, str | float] = {"_n": "_n"}
    pairs: dict[str, tuple[str, str]] = {}
    for name, spec in rates.items():
        num, den = (spec, "_n") if isinstance(spec, str) else spec
        for col in (num, den):
            if col not in sums:
                if col not in data.columns:
                    raise ValueError(f"bootstrap_rates: rate {name!r} needs column {col!r}")
                sums[col] = col
        pairs[name] = (num, den)

    def statistic(s):
        out = {}
        for name, (num, den) in pairs.items():
            with np.errstate(divide="ignore", invalid="ignore"):
                out[name] = np.where(s[den] != 0, s[num] / np.where(s[den] != 0, s[den], 1.0), np.nan)
        for name, spec in contrasts.items():
            out[name] = contrast_value(spec, out)
        return out

    res = cluster_bootstrap(data, cluster=cluster, sums=sums, statistic=statistic, n_draws=n_draws,
                            rng=np.random.default_rng(seed), strata=strata, substitute=substitute)
    names = list(pairs) + list(contrasts)
    if strata is None:
        return {n: res.interval(n) for n in names}
    levels = sorted({k for k, _ in res.draws})
    return {lvl: {n: res.interval(n, lvl) for n in names} for lvl in levels}
