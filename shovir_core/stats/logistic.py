"""Logistic regression for many weightings at once: cluster-bootstrap draws and pseudo-true fits.

:func:`~shovir_core.stats.regression.logistic_regression_cluster_robust` fits one model with
patient cluster-robust (sandwich) standard errors through statsmodels. This module adds what a
bootstrap of that model needs: every draw of a patient-clustered bootstrap is a reweighting of the
rows (row weight = how many times the draw takes the row's patient), so all draws are fitted
together by Newton-Raphson on a (draws x parameters) coefficient array, with the Hessians of every
draw from one matrix product. ModaLens App. B cross-checks its cluster-robust odds ratio this way.

The same solver fits fractional outcomes (``y`` in [0, 1]): the logistic projection of known flip
probabilities onto the regression's covariates, i.e. the coefficients the estimator converges to
when the model is misspecified (White 1982, "Maximum likelihood estimation of misspecified
models", Econometrica 50:1). A reference model that plants flip probabilities states its planted
odds ratio this way.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import expit

from .bootstrap import draw_counts, generator_seed, percentile_interval

__all__ = ["LogisticFit", "logistic_fit", "logistic_cluster_bootstrap", "fractional_logistic", "design_matrices"]

_MAX_ABS_COEF = 30.0
"""A fit whose coefficients exceed this in absolute value is separated (the MLE does not exist)."""


@dataclass(frozen=True)
class LogisticFit:
    """Coefficients of one or many weighted logistic fits.

    ``coef`` is (draws, p) -- or (p,) for a single fit -- with NaN rows where a fit did not converge
    (separation, a singular Hessian); ``converged`` says which; ``n_iter`` is the iterations used.
    """

    coef: np.ndarray
    converged: np.ndarray
    n_iter: int


def _solve(H: np.ndarray, g: np.ndarray) -> np.ndarray:
    try:
        return np.linalg.solve(H, g[..., None])[..., 0]
    except np.linalg.LinAlgError:  # some draw has a singular Hessian: solve draw by draw
        out = np.full_like(g, np.nan)
        for b in range(len(g)):
            try:
                out[b] = np.linalg.solve(H[b], g[b])
            except np.linalg.LinAlgError:
                pass
        return out


def logistic_fit(X, y, *, weights=None, start=None, max_iter: int = 100, tol: float = 1e-7) -> LogisticFit:
    """Maximum-likelihood logistic coefficients, for one weighting or a batch of them.

    Parameters
    ----------
    X : (n, p) array-like
        Design matrix (with its intercept column).
    y : (n,) array-like
        Outcomes in [0, 1] (fractional outcomes give the logistic projection of probabilities).
    weights : (n,) or (draws, n) array-like, optional
        Non-negative row weights; a 2-D array fits every row of weights (bootstrap draws) at once.
    start : (p,) or (draws, p) array-like, optional
        Starting coefficients (a bootstrap starts near each draw's solution: fewer iterations).
    max_iter, tol : int, float
        Newton-Raphson stops when every coefficient moves by less than ``tol`` (convergence is
        quadratic, so the coefficients are then exact to far below ``tol``).

    >>> X = np.column_stack([np.ones(4), [0.0, 0.0, 1.0, 1.0]])
    >>> fit = logistic_fit(X, [0.0, 1.0, 0.0, 1.0])
    >>> fit.coef.round(6).tolist(), bool(fit.converged)
    ([0.0, 0.0], True)
    >>> bool(logistic_fit(X, [0.0, 1.0, 1.0, 1.0]).converged)   # x = 1 always has y = 1: no MLE
    False
    """
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float).ravel()
    if X.ndim != 2 or X.shape[0] != len(y) or not len(y):
        raise ValueError(f"X must be (n, p) with n = len(y) = {len(y)} > 0, got shape {X.shape}")
    if not (np.isfinite(X).all() and np.isfinite(y).all()) or ((y < 0) | (y > 1)).any():
        raise ValueError("X must be finite and y must lie in [0, 1]")
    single = weights is None or np.ndim(weights) == 1
    w = np.ones((1, len(y))) if weights is None else np.atleast_2d(np.asarray(weights, dtype=float))
    if w.shape[1] != len(y) or (w < 0).any() or not np.isfinite(w).all():
        raise ValueError(f"weights must be non-negative and finite with {len(y)} columns, got shape {w.shape}")
    n, p = X.shape
    XX = (X[:, :, None] * X[:, None, :]).reshape(n, p * p)   # per-row outer products, for batched Hessians
    beta = np.zeros((len(w), p))
    if start is not None:
        s0 = np.asarray(start, dtype=float)
        if s0.shape not in ((p,), (len(w), p)):
            raise ValueError(f"start must have shape ({p},) or ({len(w)}, {p}), got {s0.shape}")
        beta[:] = s0
    active = np.ones(len(w), dtype=bool)
    done = np.zeros(len(w), dtype=bool)
    it = 0
    for it in range(1, max_iter + 1):
        todo = active & ~done
        if not todo.any():
            break
        # while most draws still move, evaluate all of them (copying the (draws x n) weight block to
        # drop the finished ones costs more than it saves); then only the unfinished ones
        idx = slice(None) if todo.mean() > 0.5 else np.flatnonzero(todo)
        b, wi = beta[idx], w[idx]
        mu = b @ X.T
        expit(mu, out=mu)
        resid = np.subtract(y, mu)
        resid *= wi
        g = resid @ X
        np.square(mu, out=resid)          # reuse the buffer: mu (1 - mu) = mu - mu^2
        mu -= resid
        mu *= wi
        H = (mu @ XX).reshape(len(b), p, p)
        step = _solve(H, g)
        bad = ~np.isfinite(step).all(axis=1)
        step[bad | ~todo[idx]] = 0.0
        beta[idx] = b + step
        blown = bad | (np.abs(beta[idx]) > _MAX_ABS_COEF).any(axis=1)
        moved = todo[idx] & ~blown & (np.abs(step) < tol).all(axis=1)
        if isinstance(idx, slice):
            active &= ~blown
            done |= moved
        else:
            active[idx[blown]] = False
            done[idx[moved]] = True
    converged = done & active
    coef = np.where(converged[:, None], beta, np.nan)
    if single:
        return LogisticFit(coef[0], np.bool_(converged[0]), it)
    return LogisticFit(coef, converged, it)


def design_matrices(data: pd.DataFrame, formula: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(y, X, term names)`` of a patsy formula, as statsmodels builds them (rows with NaN refused)."""
    import patsy

    y, X = patsy.dmatrices(formula, data, return_type="dataframe", NA_action="raise")
    return y.to_numpy(dtype=float).ravel(), X.to_numpy(dtype=float), list(X.columns)


def logistic_cluster_bootstrap(data: pd.DataFrame, formula: str, *, cluster: str, n_draws: int,
                               rng: np.random.Generator, level: float = 0.95) -> pd.DataFrame:
    """Percentile intervals of logistic coefficients and odds ratios under a clustered bootstrap.

    Each draw resamples clusters (patients) with replacement and keeps every row of a sampled
    cluster with its multiplicity (:func:`~shovir_core.stats.draw_counts`), then refits the model;
    all draws are fitted at once (:func:`logistic_fit`). Draws whose fit does not converge (a
    separated resample) are counted in ``n_failed`` and left out of the percentiles.

    Returns
    -------
    DataFrame
        Index ``term``; columns ``coef`` (full-sample fit), ``odds_ratio``, ``lo``, ``hi`` (percentile
        interval of the odds ratio), ``coef_lo``, ``coef_hi``, ``n_failed``. ``attrs``: ``n_draws``,
        ``seed``, ``n_clusters``, ``draws`` (draws x terms coefficient array).
    """
    if cluster not in data.columns:
        raise ValueError(f"data has no cluster column {cluster!r}")
    if data[cluster].isna().any():
        raise ValueError(f"column {cluster!r} has missing cluster ids")
    seed = generator_seed(rng)
    y, X, terms = design_matrices(data, formula)
    codes, clusters = pd.factorize(data[cluster], sort=True)
    full = logistic_fit(X, y)
    if not full.converged:
        raise ValueError(f"logistic fit of {formula!r} does not converge on the full data (separation?)")
    counts = draw_counts(len(clusters), n_draws=n_draws, rng=rng)
    # each draw starts from one Newton step off the full-sample fit, computed from per-cluster sums
    # of the scores and Hessians at that fit (the linearised bootstrap); exact Newton iterations on
    # the draw's reweighted rows then finish the refit in one or two steps
    p = X.shape[1]
    mu = 1.0 / (1.0 + np.exp(-(X @ full.coef)))
    score = np.stack([np.bincount(codes, weights=(y - mu) * X[:, j], minlength=len(clusters)) for j in range(p)], 1)
    hess = np.stack([np.bincount(codes, weights=mu * (1 - mu) * X[:, i] * X[:, j], minlength=len(clusters))
                     for i in range(p) for j in range(p)], 1)
    c = counts.astype(float)
    start_all = full.coef + _solve((c @ hess).reshape(n_draws, p, p), c @ score)
    start_all = np.where(np.isfinite(start_all), start_all, full.coef)
    draws = np.empty((n_draws, len(terms)))
    step = max(1, 2_000_000 // max(len(y), 1))   # bound the (draws x rows) weight block in memory
    for start in range(0, n_draws, step):
        block = counts[start:start + step][:, codes].astype(float)
        # tol 1e-5 on the last Newton step: convergence is quadratic, so the refit is then exact to ~1e-10
        draws[start:start + step] = logistic_fit(X, y, weights=block, start=start_all[start:start + step],
                                                 tol=1e-5).coef
    failed = np.isnan(draws).any(axis=1)
    rows = []
    for j, term in enumerate(terms):
        lo, hi = percentile_interval(draws[~failed, j], level=level) if (~failed).any() else (np.nan, np.nan)
        rows.append({"term": term, "coef": float(full.coef[j]), "odds_ratio": float(np.exp(full.coef[j])),
                     "lo": float(np.exp(lo)), "hi": float(np.exp(hi)), "coef_lo": lo, "coef_hi": hi,
                     "n_failed": int(failed.sum())})
    out = pd.DataFrame(rows).set_index("term")
    out.attrs.update(n_draws=int(n_draws), seed=seed, n_clusters=int(len(clusters)), draws=draws, level=level)
    return out


def fractional_logistic(data: pd.DataFrame, rhs: str, *, probability) -> pd.Series:
    """The logistic projection of known probabilities onto a design: Σ_i (p_i − σ(x_i'β)) x_i = 0.

    ``rhs`` is the right-hand side of a patsy formula (``"z_distance + label_changed + report"``);
    ``probability`` the true P(y = 1) of each row. These are the coefficients a logistic regression
    of outcomes drawn with those probabilities estimates (its pseudo-true value).

    >>> d = pd.DataFrame({"x": [0.0, 1.0]})
    >>> b = fractional_logistic(d, "x", probability=[0.5, 0.731058578630049])
    >>> [round(v, 6) for v in b]
    [0.0, 1.0]
    """
    import patsy

    X = patsy.dmatrix(rhs, data, return_type="dataframe", NA_action="raise")
    p = np.asarray(probability, dtype=float).ravel()
    if len(p) != len(X):
        raise ValueError(f"{len(p)} probabilities for {len(X)} rows")
    fit = logistic_fit(X.to_numpy(dtype=float), p)
    if not fit.converged:
        raise ValueError("fractional logistic fit did not converge (probabilities at 0 or 1 on a separating design?)")
    return pd.Series(fit.coef, index=list(X.columns), name="coef")
