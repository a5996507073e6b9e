"""Permutation nulls for paired statistics: cluster sign-flip and shuffled pairing.

* :func:`sign_flip_null` — under H0 a paired difference (e.g. flip without minus
  flip with the report) is symmetric around 0 within each cluster, so the signs
  of whole clusters' summed differences are exchangeable.
* :func:`shuffled_pairing_null` — break the pairing of two per-trial series
  (optionally within groups) to get the chance level of a paired statistic
  (e.g. the overlap of two flip indicators).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from .bootstrap import cluster_sums, generator_seed

__all__ = ["NullResult", "sign_flip_null", "shuffled_pairing_null"]


class NullResult(dict):
    """``observed``, ``null`` (draws), ``p_value`` (two-sided, add-one), ``null_mean``, ``n_perm``, ``seed``."""


def _p_two_sided(observed: float, null: np.ndarray, center: float) -> float:
    extreme = np.abs(null - center) >= abs(observed - center) - 1e-12
    return float((1 + extreme.sum()) / (1 + len(null)))


def sign_flip_null(differences, *, clusters=None, n_perm: int = 10_000,
                   rng: np.random.Generator) -> NullResult:
    """Cluster sign-flip null of the mean paired difference.

    Parameters
    ----------
    differences : (n,) array-like
        Per-trial paired differences (e.g. ``flip_A - flip_P``).
    clusters : (n,) array-like, optional
        Cluster of each trial; signs are flipped per cluster (per trial without).
    n_perm : int
        Number of random sign vectors.
    rng : numpy.random.Generator

    Returns
    -------
    NullResult
        Observed mean difference, the null draws of the mean, two-sided p-value.
    """
    d = np.asarray(differences, dtype=float).ravel()
    if not len(d) or np.isnan(d).any():
        raise ValueError("differences must be non-empty and free of NaN")
    seed = generator_seed(rng)
    groups = np.arange(len(d)) if clusters is None else np.asarray(clusters)
    _, D = cluster_sums(d, groups)
    D = D[:, 0]
    signs = rng.integers(0, 2, size=(n_perm, len(D)), dtype=np.int8) * 2 - 1
    null = (signs @ D) / len(d)
    observed = float(d.mean())
    return NullResult(observed=observed, null=null, p_value=_p_two_sided(observed, null, 0.0),
                      null_mean=float(null.mean()), n_perm=n_perm, seed=seed)


def shuffled_pairing_null(a, b, statistic: Callable[[np.ndarray, np.ndarray], float], *,
                          groups=None, n_perm: int = 1_000, rng: np.random.Generator) -> NullResult:
    """Null of a paired statistic with the pairing of ``a`` and ``b`` shuffled.

    Parameters
    ----------
    a, b : (n,) array-like
        Paired per-trial values.
    statistic : callable
        ``statistic(a, b) -> float`` (e.g. :func:`shovir_core.stats.jaccard`).
    groups : (n,) array-like, optional
        Shuffle only within groups (e.g. within finding), keeping group composition.
    n_perm : int
    rng : numpy.random.Generator

    Returns
    -------
    NullResult
        Observed statistic, null draws, two-sided p-value around the null mean.
    """
    x, y = np.asarray(a), np.asarray(b)
    if x.shape != y.shape or x.ndim != 1 or not len(x):
        raise ValueError(f"a and b must be equal-length non-empty 1-d arrays; got {x.shape} and {y.shape}")
    seed = generator_seed(rng)
    if groups is None:
        index_sets = [np.arange(len(y))]
    else:
        g = np.asarray(groups)
        if g.shape != x.shape:
            raise ValueError(f"groups has shape {g.shape}, expected {x.shape}")
        codes, _ = pd.factorize(g)
        index_sets = [np.flatnonzero(codes == c) for c in range(codes.max() + 1)]
    null = np.empty(n_perm)
    for i in range(n_perm):
        perm = np.empty(len(y), dtype=np.int64)
        for idx in index_sets:
            perm[idx] = idx[rng.permutation(len(idx))]
        null[i] = statistic(x, y[perm])
    observed = float(statistic(x, y))
    center = float(null.mean())
    return NullResult(observed=observed, null=null, p_value=_p_two_sided(observed, null, center),
                      null_mean=center, n_perm=n_perm, seed=seed)
